"""The service's shape: one router module per resource, and the one error table."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from fastapi import APIRouter
from fastapi.routing import APIRoute, iter_route_contexts

import berth.service.routes as routes_pkg
from berth.core.errors import BerthError, SpecError
from berth.policy.errors import MultiCloudInputError
from berth.service.app import ROUTERS, create_app
from berth.service.config import ServiceConfig
from berth.service.errors import from_berth_error
from berth.service.placing.errors import BadRequestError, ContentionError, NoPlacementError
from berth.store.errors import (
    GenerationConflictError,
    InvalidReferenceError,
    NotFoundError,
    PlanRejectedError,
)
from berth.store.repo import Store


def test_every_route_lives_in_one_router_module_per_resource(tmp_path: Path):
    modules = [
        importlib.import_module(f"{routes_pkg.__name__}.{m.name}")
        for m in pkgutil.iter_modules(routes_pkg.__path__)
    ]
    for module in modules:
        routers = [v for v in vars(module).values() if isinstance(v, APIRouter)]
        assert routers == [module.router], module.__name__
    assert {id(m.router) for m in modules} == {id(r) for r in ROUTERS}

    store = Store.open(f"sqlite:///{tmp_path / 'berth.db'}")
    try:
        app = create_app(ServiceConfig(db_url=str(store.engine.url)), store=store, background=False)
        served = [
            r for r in iter_route_contexts(app.routes) if isinstance(r.original_route, APIRoute)
        ]
        assert len(served) >= 50
        for route in served:
            where = str(route.endpoint.__module__)
            if str(route.path).startswith("/dashboard"):  # the pages, not the API
                assert where.startswith("berth.service.dashboard."), route.path
                continue
            assert where.startswith(routes_pkg.__name__ + "."), route.path
    finally:
        store.close()


def test_the_error_table_picks_the_nearest_class():
    def answer(exc: BerthError) -> tuple[int, str, str | None]:
        err = from_berth_error(exc)
        return err.status, err.code, err.field

    assert answer(NotFoundError("host", "h1")) == (404, "not_found", None)
    assert answer(InvalidReferenceError("image", "unknown")) == (422, "invalid_reference", "image")
    assert answer(BadRequestError("count", "too many", "bad_count")) == (422, "bad_count", "count")
    assert answer(GenerationConflictError("host", "h1")) == (409, "generation_conflict", None)
    assert answer(PlanRejectedError("gone")) == (409, "plan_rejected", None)
    assert answer(SpecError("bad")) == (422, "invalid_input", None)
    assert answer(MultiCloudInputError("--flavor: unknown")) == (422, "invalid_input", None)
    busy = from_berth_error(ContentionError("busy"))
    assert (busy.status, busy.code, busy.headers) == (409, "contention", {"Retry-After": "1"})
    full = from_berth_error(NoPlacementError("0/3 hosts fit", "no_hosts", {"az1": "full"}))
    assert (full.status, full.code) == (409, "no_valid_host")
    assert full.details == {"reason": "no_hosts", "az1": "full"}
