"""Bad numbers and networks in API bodies get a 422 naming the field and change nothing:
booleans are not integers (`count: true` is not 1), and a network's CIDR is a real network."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.conftest import Env

NET = {"name": "net-az1", "cluster": "az1", "cidr": "10.1.0.0/16", "total": 100}


def _refused(resp: Any, field: str) -> None:
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["field"] == field, resp.json()


@pytest.mark.parametrize("count", [True, False, 1.0, "1"])
def test_a_count_must_be_an_integer(env: Env, count: object) -> None:
    before = env.get("/v1/instances").json()
    _refused(env.post("/v1/placements", {"flavor": "c3.large", "count": count}), "body.count")
    assert env.get("/v1/instances").json() == before
    assert env.post("/v1/placements", {"flavor": "c3.large", "count": 1}).status_code == 201


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/networks", dict(NET, total=True), "body.total"),
        ("/v1/flavors", {"name": "f-bool", "vcpus": True, "memory_mb": 512}, "body.vcpus"),
        ("/v1/deployment-sets", {"id": "s-bool", "max_size": True}, "body.max_size"),
    ],
)
def test_booleans_are_not_sizes(env: Env, path: str, body: dict[str, Any], field: str) -> None:
    _refused(env.post(path, body, "operator" if path != "/v1/deployment-sets" else "admin"), field)


@pytest.mark.parametrize("cidr", ["999.1.1.1/99", "10.0.0.0/33", "1.2.3/8", "::1/129"])
def test_a_network_needs_a_real_cidr(env: Env, cidr: str) -> None:
    _refused(env.post("/v1/networks", dict(NET, cidr=cidr), "operator"), "body.cidr")
    assert env.get("/v1/networks").json() == []
    assert env.post("/v1/networks", dict(NET, cidr="fd00::/64"), "operator").status_code == 201
