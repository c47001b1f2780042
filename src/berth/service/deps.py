"""The FastAPI dependencies every router uses: the caller's role, Idempotency-Key, shared objects.

Who is calling comes from the bearer token (`berth.service.auth`); the shared objects (store,
replica, metrics, ...) from `request.app.state`.

The dependencies are coroutines: FastAPI runs a plain function dependency in the thread pool, a
hand-off to a worker thread and back per request. A cached token needs no I/O, so it is answered
on the event loop; only a cache miss (once per token and TTL) goes to a thread. The shared
objects are read from `app.state`, set once by `berth.service.app.create_app`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from berth.service.auth import (
    Authenticator,
    Principal,
    refuse_agent,
    require,
    require_group,
    require_reporter,
    require_vm,
)
from berth.service.clouds.service import CloudService
from berth.service.config import ServiceConfig
from berth.service.defrag import DefragService
from berth.service.errors import ApiError
from berth.service.metrics import Metrics
from berth.service.replica import Replica
from berth.store.repo import Store

# ---------------------------------------------------------------------------- who is calling
_bearer = HTTPBearer(auto_error=False, description="`berth admin create-token` prints one.")
"""Declares the `HTTPBearer` security scheme in /openapi.json (Swagger UI's Authorize button);
it rejects nothing itself: `Authenticator` reads the header and answers every 401."""


async def _caller(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> Principal:
    auth: Authenticator = request.app.state.auth
    authorization = request.headers.get("authorization")
    found = auth.cached(authorization)
    if found is None:
        found = await run_in_threadpool(auth.authenticate, authorization)
    return found


async def _principal(p: Annotated[Principal, Depends(_caller)]) -> Principal:
    """Every route's caller; an agent token is refused here, so a route admits one only by
    asking for `Reporter` instead."""
    refuse_agent(p)
    return p


async def _reporter(name: str, p: Annotated[Principal, Depends(_caller)]) -> Principal:
    require_reporter(p, name)
    return p


async def _vm_agent(name: str, p: Annotated[Principal, Depends(_caller)]) -> Principal:
    require_vm(p, name)
    return p


async def _elastic(p: Annotated[Principal, Depends(_caller)]) -> Principal:
    require_group(p, None)
    return p


async def _reader(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p)
    return p


async def _operator(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p, write=True)
    return p


async def _admin(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p, admin=True)
    return p


Who = Annotated[Principal, Depends(_principal)]
"""Any valid token (tenant routes check the project themselves)."""
Reader = Annotated[Principal, Depends(_reader)]
"""Fleet reads: any role but tenant."""
Operator = Annotated[Principal, Depends(_operator)]
"""Fleet writes: operator or admin."""
Admin = Annotated[Principal, Depends(_admin)]
"""Tokens: admin only."""
Reporter = Annotated[Principal, Depends(_reporter)]
"""A host's reports (`{name}` in the path): operator, admin, or an agent token of that host."""

VmAgent = Annotated[Principal, Depends(_vm_agent)]
"""An elastic VM's agent routes (`{name}` in the path): operator, admin, or its vm token."""
Elastic = Annotated[Principal, Depends(_elastic)]
"""Elastic pool routes: any role but tenant, agent and vm; a route checks the group with
`require_group` (a group-admin token uses only its own group)."""

IdempotencyKey = Annotated[
    str | None,
    Header(max_length=128, pattern=r"^[\x21-\x7e]+$", description="makes retries safe"),
]


def deny_reader(p: Principal, action: str) -> None:
    """Placements, instances and deployment sets take any role but reader (a tenant acts for
    its own project); 403 naming the `action` refused."""
    if p.role == "reader":
        raise ApiError(403, "forbidden", f"role 'reader' cannot {action}")


# ---------------------------------------------------------------------------- shared objects
def _app_state(name: str) -> Callable[[Request], Awaitable[Any]]:
    """A dependency returning one of the shared objects `create_app` keeps in `app.state`."""

    async def shared(request: Request) -> Any:
        return getattr(request.app.state, name)

    return shared


ConfigDep = Annotated[ServiceConfig, Depends(_app_state("config"))]
StoreDep = Annotated[Store, Depends(_app_state("store"))]
ReplicaDep = Annotated[Replica, Depends(_app_state("replica"))]
MetricsDep = Annotated[Metrics, Depends(_app_state("metrics"))]
AuthDep = Annotated[Authenticator, Depends(_app_state("auth"))]
DefragDep = Annotated[DefragService, Depends(_app_state("defrag"))]
CloudsDep = Annotated[CloudService, Depends(_app_state("clouds"))]
