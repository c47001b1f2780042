"""Apps of one process share their built routes (`berth.service.shared_routes`) and nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi import APIRouter, FastAPI

from berth.service.app import ROUTERS
from berth.service.errors import ERROR_RESPONSES
from berth.service.shared_routes import include_routers
from tests.service.conftest import make_env


def test_shared_routes_serve_the_same_api_as_a_plain_inclusion():
    plain = FastAPI(responses=ERROR_RESPONSES)
    for router in ROUTERS:
        plain.include_router(router)
    shared = [FastAPI(responses=ERROR_RESPONSES) for _ in range(2)]
    for app in shared:
        include_routers(app, ROUTERS)
    tails = [app.routes[-len(ROUTERS) :] for app in shared]
    assert all(x is y for x, y in zip(*tails, strict=True))  # the same objects, built once
    for app in shared:
        assert app.openapi() == plain.openapi()


def test_other_defaults_build_routes_of_their_own():
    router = APIRouter(prefix="/v1")

    @router.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    first, second = FastAPI(), FastAPI(responses={418: {"description": "a teapot"}})
    include_routers(first, [router])
    include_routers(second, [router])
    assert first.routes[-1] is not second.routes[-1]
    assert "418" not in first.openapi()["paths"]["/v1/ping"]["get"]["responses"]
    assert "418" in second.openapi()["paths"]["/v1/ping"]["get"]["responses"]


def test_each_app_answers_from_its_own_store(demo_db: Path, tmp_path: Path):
    envs = []
    for name in ("a", "b"):
        shutil.copy(demo_db, tmp_path / f"{name}.db")
        envs.append(make_env(tmp_path / f"{name}.db"))
    a, b = envs
    try:
        made = a.post("/v1/tokens", {"name": "only-in-a", "role": "reader"})
        assert made.status_code == 201, made.text
        assert "only-in-a" in {t["name"] for t in a.get("/v1/tokens").json()}
        assert "only-in-a" not in {t["name"] for t in b.get("/v1/tokens").json()}
        reader_of_a = {"Authorization": f"Bearer {made.json()['token']}"}
        assert a.client.get("/v1/hosts", headers=reader_of_a).status_code == 200
        assert b.client.get("/v1/hosts", headers=reader_of_a).status_code == 401
    finally:
        for env in envs:
            env.store.close()
