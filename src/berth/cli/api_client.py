"""HTTP calls from the `berth api ...` commands to a running service, and how errors exit.

The client commands read `--url` / `BERTH_URL` and `--token` / `BERTH_TOKEN`. Exit codes follow
the local commands: 0 success, 1 no valid host (the diagnosis is printed), 2 bad input or an API
error, 3 the service cannot be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer

from berth.cli.service_options import fail

UrlOpt = Annotated[
    str, typer.Option("--url", envvar="BERTH_URL", help="The Berth service's base URL.")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="BERTH_TOKEN", help="Bearer token.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def call(method: str, url: str, path: str, token: str | None, **kwargs: Any) -> tuple[int, Any]:
    """(status, body) of one request; an unreachable service exits 3."""
    import httpx

    headers = dict(kwargs.pop("headers", {}) or {})
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        resp = httpx.request(method, url.rstrip("/") + path, headers=headers, timeout=30, **kwargs)
    except httpx.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}", 3)
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    return resp.status_code, body


def api_error(status: int, body: Any) -> NoReturn:
    """Exit on an API error: 1 for no valid host, else 2."""
    if isinstance(body, dict) and "error" in body:
        e = body["error"]
        fail(f"{e.get('code')}: {e.get('message')}", 1 if e.get("code") == "no_valid_host" else 2)
    fail(f"HTTP {status}: {body}")


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
