"""`include_routers`: `app.include_router` for a set of routers, built once per process.

FastAPI builds an included router's routes (each parameter's and response's pydantic validator,
the dependency tree, the handler) for every inclusion: about 0.2 s of CPU for the ~100 routes of
one Berth app. What it builds depends only on the routers and the including router's defaults
(`responses`, `dependencies`, ...), never on the app, and a request reaches its own app through
`request.app` (the ASGI scope), so every app of one process with the same defaults can share
the included routes: the first app builds them, the others reuse them (the tests build hundreds
of apps). One difference from `include_router`: `app.dependency_overrides` do not reach the
shared routes (Berth uses none), and the routers may not carry startup, shutdown or lifespan
handlers (they would have to be merged into each app's).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute

_lock = threading.Lock()
_shared: dict[tuple[int, ...], tuple[tuple[APIRouter, ...], tuple[Any, ...], list[BaseRoute]]] = {}
"""id of each router -> (the routers, kept alive; the defaults they were built with; routes)."""


def _defaults(router: APIRouter) -> tuple[Any, ...]:
    """The including router's settings that FastAPI folds into each included route."""
    return (
        router.prefix,
        router.tags,
        router.dependencies,
        router.default_response_class,
        router.responses,
        router.callbacks,
        router.deprecated,
        router.include_in_schema,
        router.generate_unique_id_function,
        router.strict_content_type,
        router.max_body_size,
        router.form_limits,
    )


def _build(routers: Sequence[APIRouter], like: APIRouter) -> list[BaseRoute]:
    parent = APIRouter(
        prefix=like.prefix,
        tags=like.tags,
        dependencies=like.dependencies,
        default_response_class=like.default_response_class,
        responses=like.responses,
        callbacks=like.callbacks,
        deprecated=like.deprecated,
        include_in_schema=like.include_in_schema,
        generate_unique_id_function=like.generate_unique_id_function,
        strict_content_type=like.strict_content_type,
        max_body_size=like.max_body_size,
        form_limits=like.form_limits,
    )
    for router in routers:
        if router.on_startup or router.on_shutdown:
            raise ValueError(f"router {router.prefix!r} has startup or shutdown handlers")
        parent.include_router(router)
    for _context in iter_route_contexts(parent.routes):
        pass  # FastAPI builds an included router's routes on first use: build them now
    return list(parent.routes)


def include_routers(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Append the routers' routes to `app`, as `app.include_router` on each would, in order."""
    key = tuple(id(router) for router in routers)
    defaults = _defaults(app.router)
    with _lock:
        cached = _shared.get(key)
        if cached is None or cached[1] != defaults:
            cached = (tuple(routers), defaults, _build(routers, app.router))
            _shared[key] = cached
    app.router.routes.extend(cached[2])
