"""Who is looking: the dashboard's token, from its cookie (or a bearer header), and the roles.

The login form posts a token; it is checked by the service's own `Authenticator` and kept in an
HttpOnly, SameSite=Strict cookie scoped to `/dashboard`, so page scripts never read it and
another site cannot send it. Every page and data route authenticates the cookie again (the
Authenticator's cache makes that free), so a revoked token stops working within the token cache
TTL as it does on the API. Changes (defrag actions) also need the `X-Berth-Dashboard` header,
which a cross-site form cannot set.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from berth.service.auth import Authenticator, Principal, require, require_group
from berth.service.errors import ApiError

COOKIE = "berth_dashboard"
PATH = "/dashboard"
ACTION_HEADER = "x-berth-dashboard"
ROLES = ("admin", "operator", "reader", "tenant", "group-admin")
"""Roles that may use the dashboard; agent and vm tokens have nothing to look at."""


class LoginRequiredError(Exception):
    """No valid token: pages redirect to the login form, data routes answer 401."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def header_of(request: Request) -> str | None:
    """The Authorization header to check: the request's own, else the cookie's token."""
    header = request.headers.get("authorization")
    if header:
        return header
    token = request.cookies.get(COOKIE)
    return f"Bearer {token}" if token else None


async def viewer(request: Request) -> Principal:
    """The caller, or `LoginRequiredError`."""
    header = header_of(request)
    if header is None:
        raise LoginRequiredError("log in with a token")
    return await check(request.app.state.auth, header)


async def check(auth: Authenticator, header: str) -> Principal:
    """The principal of an Authorization header if it may use the dashboard, else
    `LoginRequiredError` with the reason."""
    try:
        found = auth.cached(header)
        if found is None:
            found = await run_in_threadpool(auth.authenticate, header)
    except ApiError as exc:
        raise LoginRequiredError(exc.message) from None
    if found.role not in ROLES:
        raise LoginRequiredError(f"{found.role} tokens cannot use the dashboard")
    return found


Viewer = Annotated[Principal, Depends(viewer)]


def can_read_fleet(p: Principal) -> bool:
    return p.role in ("admin", "operator", "reader")


def can_change_fleet(p: Principal) -> bool:
    return p.role in ("admin", "operator")


def can_see_elastic(p: Principal) -> bool:
    return p.role != "tenant"


def need_fleet(p: Principal, *, write: bool = False) -> None:
    """403 (the API's own check and words) unless the role may read (or change) the fleet."""
    require(p, write=write)


def need_elastic(p: Principal, group: str | None = None) -> None:
    require_group(p, group)


def check_action(request: Request) -> None:
    """A change must come from the dashboard's own script (its header), never a plain form."""
    if request.headers.get(ACTION_HEADER) != "1":
        raise ApiError(403, "forbidden", f"missing the {ACTION_HEADER} header")
