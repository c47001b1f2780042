"""Affinity deployment sets on the demo topology (clusters az1, az2, az3): every member on one
host, whichever cluster a placement names or not, and with replicas deciding on stale caches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.service.conftest import Env, make_env
from tests.service.test_policy import penv, policy_db

__all__ = ["penv", "policy_db"]

FLAVOR = "c3.large"


def _hosts(resp: Any) -> list[tuple[str, str]]:
    assert resp.status_code == 201, resp.text
    return [(i["cluster"], i["host"]) for i in resp.json()["instances"]]


def _members(env: Env, set_id: str) -> set[tuple[str, str]]:
    rows = env.get("/v1/instances", params={"deployment_set": set_id, "limit": 1000}).json()
    return {(r["cluster"], r["host"]) for r in rows}


def test_members_naming_other_clusters_are_refused(env: Env) -> None:
    assert env.post("/v1/deployment-sets", {"id": "aff", "policy": "affinity"}).status_code == 201
    home = _hosts(env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff"}))
    cluster, host = home[0]
    for other in sorted({"az1", "az2", "az3"} - {cluster}):
        resp = env.post(
            "/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff", "cluster": other}
        )
        assert resp.status_code == 409, resp.text
        err = resp.json()["error"]
        assert err["code"] == "no_valid_host"
        assert err["details"]["reason"] == "deployment_set_affinity"
        assert err["details"]["cluster"] == cluster
        assert err["details"]["hosts"] == [host]
        assert f"on host {host} in cluster {cluster}" in err["message"]
    named = {"flavor": FLAVOR, "deployment_set": "aff", "cluster": cluster}
    assert _hosts(env.post("/v1/placements", named)) == home
    assert _members(env, "aff") == {(cluster, host)}


def test_members_without_a_cluster_join_the_first_one(env: Env) -> None:
    """Clusters are ordered by free capacity: without the set's home, members would spread."""
    assert env.post("/v1/deployment-sets", {"id": "aff", "policy": "affinity"}).status_code == 201
    first = _hosts(env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff"}))
    for seed in range(4):
        body = {"flavor": FLAVOR, "deployment_set": "aff", "seed": seed}
        assert _hosts(env.post("/v1/placements", body)) == first
    assert _members(env, "aff") == set(first)
    # a request for more than the host holds fails whole, in the set's own cluster only
    resp = env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff", "count": 100})
    assert resp.status_code == 409, resp.text
    assert set(resp.json()["error"]["details"]["clusters"]) == {first[0][0]}
    assert _members(env, "aff") == set(first)


def test_one_request_puts_all_its_members_on_one_host(env: Env) -> None:
    assert env.post("/v1/deployment-sets", {"id": "aff", "policy": "affinity"}).status_code == 201
    placed = _hosts(
        env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff", "count": 3})
    )
    assert len(placed) == 3
    assert len(set(placed)) == 1


def test_a_stale_replica_joins_the_set_where_another_replica_put_it(
    env: Env, tmp_path: Path
) -> None:
    """Two replicas on one database, the second never told of the first's commits (no
    background sync): its decision on the stale cache loses the set's generation race, and
    after catching up it places on the set's host, or refuses another cluster."""
    assert env.post("/v1/deployment-sets", {"id": "aff", "policy": "affinity"}).status_code == 201
    stale = make_env(Path(env.store.engine.url.database or ""), replica_id="r2")
    try:
        home = _hosts(env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff"}))
        cluster = home[0][0]
        other = "az2" if cluster != "az2" else "az3"
        resp = stale.post(
            "/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff", "cluster": other}
        )
        assert resp.status_code == 409, resp.text
        assert resp.json()["error"]["details"]["reason"] == "deployment_set_affinity"
        # r1 adds a member r2 has not heard of; r2 still joins that host
        assert _hosts(env.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff"})) == (
            home
        )
        assert (
            _hosts(stale.post("/v1/placements", {"flavor": FLAVOR, "deployment_set": "aff"}))
            == home
        )
        assert _members(env, "aff") == set(home)
    finally:
        stale.store.close()


def test_schedule_refuses_an_affinity_set(penv: Env) -> None:
    """The multi-cloud pipeline spreads a set's members (one per host or rack)."""
    resp = penv.post("/v1/deployment-sets", {"id": "aff", "policy": "affinity"})
    assert resp.status_code == 201, resp.text
    body = {"region": "beijing", "flavor": "v.c3.large", "count": 2, "deployment_set": "aff"}
    resp = penv.post("/v1/schedule", body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["field"] == "deployment_set"
    assert "affinity" in resp.json()["error"]["message"]
