"""API fuzzing: schemathesis generates requests from /openapi.json; no answer may be a 5xx.

Every operation is called with an admin token (so bodies reach the handlers, not just the auth
check) and with a tenant token, on a copy of the demo topology. Bounded: a few dozen examples per
operation, derandomised by the suite's Hypothesis profile.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.service.conftest import Env, make_env


@pytest.fixture(scope="module")
def fuzz_env(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    db = tmp_path_factory.mktemp("fuzz") / "berth.db"
    shutil.copy(demo_db, db)
    env = make_env(db, replica_id="fuzz")
    yield env
    env.store.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_env: Env) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", fuzz_env.app)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: Any, fuzz_env: Env) -> None:
    for who in ("admin", "alpha"):
        # what fails here is a 5xx answer, not a slow one: schemathesis's 10 s read timeout
        # tripped on a loaded machine running the suite in parallel
        response = case.call(headers=fuzz_env.h(who), timeout=120)
        assert response.status_code < 500, (who, case.method, case.path, response.text[:500])
        if response.status_code >= 400:
            body = response.json()
            assert set(body["error"]) >= {"code", "message"}, body
