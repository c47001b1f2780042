"""Authenticate before reading a body, and cap request bodies (an ASGI middleware).

FastAPI reads and parses a request's body before it runs a route's dependencies, so without
this an unauthenticated client could make every replica buffer a body of any size before its
401. `RequestGuard` sits outside the routers (docs/service.md, "Who is refused, and when"):

* a `/v1` request without a valid bearer token is answered 401 before one byte of its body is
  read (the token lookup fills the cache the route's own check then uses);
* a body whose `Content-Length` is over `ServiceConfig.max_body_bytes` is answered 413 at once;
  a chunked body (no length) is counted as it is read and answered 413 as soon as it passes the
  limit, so no replica holds more than the limit of any one body.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from berth.service.auth import Authenticator
from berth.service.errors import ApiError, error_response

TOO_LARGE = "payload_too_large"


def too_large(limit: int) -> ApiError:
    return ApiError(413, TOO_LARGE, f"request body larger than {limit} bytes")


class RequestGuard:
    """Refuse unauthenticated `/v1` requests and over-large bodies before reading them."""

    def __init__(self, app: ASGIApp, *, auth: Authenticator, max_body_bytes: int) -> None:
        self.app = app
        self.auth = auth
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = await self._refusal(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    async def _refusal(self, scope: Scope) -> ApiError | None:
        """The 401 or 413 answered without reading the body, or None to go on."""
        headers = dict(scope["headers"])
        if scope["path"].startswith("/v1/") or scope["path"] == "/v1":
            refusal = await self._unauthenticated(headers.get(b"authorization"))
            if refusal is not None:
                return refusal
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return too_large(self.limit)
        return None

    async def _unauthenticated(self, raw: bytes | None) -> ApiError | None:
        header = raw.decode("latin-1") if raw is not None else None
        try:
            if self.auth.cached(header) is None:
                await run_in_threadpool(self.auth.authenticate, header)
        except ApiError as exc:
            return exc
        except Exception:  # e.g. the database is down: the route itself answers it (503)
            return None
        return None

    def _counting(self, receive: Receive) -> Receive:
        """`receive`, refusing (413) a body once more than the limit has arrived."""
        seen = 0
        limit = self.limit

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # an HTTPException passes FastAPI's body parsing unchanged to the handlers
                    raise HTTPException(413, too_large(limit).message)
            return message

        return counted
