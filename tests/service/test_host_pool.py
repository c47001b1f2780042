"""`POST /v1/hosts` with a `pool`: the host carries the pool's trait and takes its placements."""

from __future__ import annotations

from berth.fleet.demo import DEMO_NOW
from tests.service.conftest import Env

NEW_HOST = {
    "name": "pooled-az1-000",
    "cluster": "az1",
    "pool": "shared",
    "availability_zone": "az1-new",  # only this host: a placement there must choose it
    "aggregates": ["std-pool"],
    "disk": {"hdd_gb": 2000},
    "numa_cells": [{"shared_cpus": 8, "dedicated_cpus": 24, "memory_mb": 196608}] * 2,
}


def test_a_host_added_to_a_pool_gets_its_trait_and_is_chosen_for_it(env: Env) -> None:
    added = env.post("/v1/hosts", NEW_HOST, "operator")
    assert added.status_code == 201, added.text
    assert added.json()["pool"] == "shared"
    assert added.json()["traits"] == ["CUSTOM_POOL_SHARED"]
    assert env.get(f"/v1/hosts/{NEW_HOST['name']}").json()["traits"] == ["CUSTOM_POOL_SHARED"]
    beat = env.post(f"/v1/hosts/{NEW_HOST['name']}/reports", {"timestamp": DEMO_NOW}, "operator")
    assert beat.status_code == 200, beat.text

    placed = env.post(
        "/v1/placements",
        {"flavor": "c3.large", "cluster": "az1", "pool": "shared", "availability_zone": "az1-new"},
    )
    assert placed.status_code == 201, placed.text
    assert [i["host"] for i in placed.json()["instances"]] == [NEW_HOST["name"]]


def test_a_trait_given_with_the_pool_is_not_repeated(env: Env) -> None:
    body = {**NEW_HOST, "traits": ["CUSTOM_POOL_SHARED", "CUSTOM_X"]}
    added = env.post("/v1/hosts", body, "operator")
    assert added.status_code == 201, added.text
    assert added.json()["traits"] == ["CUSTOM_POOL_SHARED", "CUSTOM_X"]


def test_a_host_without_a_pool_keeps_its_traits(env: Env) -> None:
    body = {**NEW_HOST, "pool": None, "traits": ["CUSTOM_X"]}
    added = env.post("/v1/hosts", body, "operator")
    assert added.status_code == 201, added.text
    assert added.json()["traits"] == ["CUSTOM_X"]
