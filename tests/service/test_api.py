"""Every route through the real app: happy path, auth, bad input, idempotency."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from berth.fleet.demo import DEMO_NOW
from berth.store.audit import audit
from berth.store.repo import TokenRow
from tests.service.conftest import Env, make_env

HOST_BODY = {
    "name": "new-az1-000",
    "cluster": "az1",
    "pool": "shared",
    "availability_zone": "az1",
    "aggregates": ["std-pool"],
    "traits": ["CUSTOM_POOL_SHARED"],
    "reserved_memory_mb": 8192,
    "disk": {"hdd_gb": 2000},
    "numa_cells": [{"shared_cpus": 8, "dedicated_cpus": 24, "memory_mb": 196608}] * 2,
}


def error(resp) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) >= {"code", "message"}
    return body["error"]


# ---------------------------------------------------------------------------- auth everywhere
def v1_routes(env: Env) -> list[tuple[str, str]]:
    out = []
    for route in iter_route_contexts(env.app.routes):  # the routes of every included router
        path = getattr(route, "path", "")
        if path.startswith("/v1"):
            for method in sorted(getattr(route, "methods", ()) or ()):
                out.append((method, path.replace("{", "").replace("}", "")))
    return out


def test_every_v1_route_needs_a_token(env: Env):
    routes = v1_routes(env)
    assert len(routes) >= 35
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            resp = env.client.request(method, path, headers=headers)
            assert resp.status_code == 401, (method, path, resp.text)
            assert error(resp)["code"] == "unauthenticated"


def test_readers_cannot_write_and_tenants_cannot_read_the_fleet(env: Env):
    for method, path in v1_routes(env):
        if method == "GET" or "tokens" in path:
            continue
        resp = env.client.request(method, path, headers=env.h("reader"), json={})
        assert resp.status_code in (403, 422), (method, path, resp.text)
        if resp.status_code == 403:
            assert error(resp)["code"] == "forbidden"
    for path in ("/v1/hosts", "/v1/clusters", "/v1/events", "/v1/capacity", "/v1/stats"):
        assert env.get(path, "alpha").status_code == 403
    for path in ("/v1/flavors", "/v1/images", "/v1/instances", "/v1/deployment-sets"):
        assert env.get(path, "alpha").status_code == 200


def test_health_and_metrics_are_open(env: Env):
    health = env.client.get("/healthz").json()
    assert health["status"] == "ok"
    assert health["hosts"] == 270
    env.post("/v1/placements", {"flavor": "c3.large"})
    env.post("/v1/placements", {"flavor": "gn3.4xlarge", "count": 100})
    text = env.client.get("/metrics").text
    assert "berth_decision_seconds_bucket" in text
    assert 'berth_placements_total{outcome="success",reason="placed"} 1.0' in text
    assert 'berth_commit_seconds_count{result="committed"} 1.0' in text  # the failed one: none
    assert 'berth_capacity_remaining{cluster="az1",flavor="c3.large"}' in text
    assert 'berth_event_lag{replica="r1"} 0.0' in text


def test_unknown_routes_and_methods_are_json(env: Env):
    assert error(env.get("/v1/nothing"))["code"] == "not_found"
    resp = env.client.put("/v1/regions", headers=env.h("admin"))
    assert resp.status_code == 405
    assert error(resp)["code"] == "method_not_allowed"


# ---------------------------------------------------------------------------- topology
def test_regions(env: Env):
    assert [r["name"] for r in env.get("/v1/regions").json()] == ["idc-east", "idc-north"]
    assert env.post("/v1/regions", {"name": "idc-west"}, "operator").status_code == 201
    assert error(env.post("/v1/regions", {"name": "idc-west"}))["code"] == "already_exists"
    bad = env.post("/v1/regions", {"name": "bad name"})
    assert bad.status_code == 422
    assert error(bad)["field"] == "body.name"
    assert error(env.post("/v1/regions", {"name": "x", "extra": 1}))["field"] == "body.extra"


def test_clusters_join_and_leave_at_run_time(env: Env):
    clusters = {c["name"]: c for c in env.get("/v1/clusters").json()}
    assert clusters["az1"] == {
        "name": "az1",
        "region": "idc-north",
        "state": "active",
        "hosts": 91,
        "driver": None,
    }
    resp = env.post("/v1/clusters", {"name": "az9", "region": "idc-east"}, "operator")
    assert resp.status_code == 201
    assert error(env.post("/v1/clusters", {"name": "az8", "region": "mars"}))["field"] == "region"
    # az1 and az2 leave: placements go to az3 only; running instances stay
    before = len(env.get("/v1/instances", params={"cluster": "az1"}).json())
    for name in ("az1", "az2"):
        assert env.post(f"/v1/clusters/{name}/leave", who="operator").json()["state"] == "left"
    for _ in range(3):
        placed = env.post("/v1/placements", {"flavor": "c3.large"}).json()
        assert placed["cluster"] == "az3"
    assert len(env.get("/v1/instances", params={"cluster": "az1"}).json()) == before
    only_left = env.post("/v1/placements", {"flavor": "c3.large", "cluster": "az1"})
    assert error(only_left)["code"] == "no_valid_host"
    assert error(only_left)["details"]["rejected_clusters"] == {"az1": "cluster has left"}
    assert env.post("/v1/clusters/az1/join", who="operator").json()["state"] == "active"
    assert env.post("/v1/placements", {"flavor": "c3.large", "cluster": "az1"}).status_code == 201
    assert error(env.post("/v1/clusters/nope/leave"))["code"] == "not_found"


def test_pools(env: Env):
    pools = env.get("/v1/pools", params={"cluster": "az1"}).json()
    assert {p["name"] for p in pools} == {"shared", "enterprise", "dpdk", "local-ssd", "gpu"}
    body = {"cluster": "az9", "name": "x", "trait": "CUSTOM_X"}
    assert error(env.post("/v1/pools", body))["code"] == "invalid_reference"
    body["cluster"] = "az1"
    assert env.post("/v1/pools", body, "operator").status_code == 201
    assert error(env.post("/v1/pools", body))["code"] == "already_exists"
    placed = env.post("/v1/placements", {"flavor": "c3.large", "pool": "enterprise"}).json()
    assert all(i["host"].startswith("ent-") for i in placed["instances"])
    assert error(env.post("/v1/placements", {"flavor": "c3.large", "pool": "x"}))["code"] == (
        "no_valid_host"
    )


# ---------------------------------------------------------------------------- hosts
def test_hosts_list_get_add(env: Env):
    hosts = env.get("/v1/hosts", params={"cluster": "az3"}).json()
    assert len(hosts) == 89
    one = env.get("/v1/hosts/std-az1-000").json()
    assert one["cluster"] == "az1"
    assert one["pool"] == "shared"
    assert one["usage"]["instances"] >= 0
    assert error(env.get("/v1/hosts/nope"))["code"] == "not_found"
    resp = env.post("/v1/hosts", HOST_BODY, "operator")
    assert resp.status_code == 201, resp.text
    assert resp.json()["usage"]["instances"] == 0
    assert error(env.post("/v1/hosts", HOST_BODY))["code"] == "already_exists"
    bad = dict(HOST_BODY, name="x-1", numa_cells=[])
    assert error(env.post("/v1/hosts", bad))["field"] == "body.numa_cells"
    bad = dict(HOST_BODY, name="x-1", aggregates=["nope"])
    assert error(env.post("/v1/hosts", bad))["code"] == "invalid_reference"
    # the new host takes placements at once
    placed = env.post(
        "/v1/placements",
        {"flavor": "c3.8xlarge.numa2", "count": 1, "cluster": "az1", "same_host": []},
    )
    assert placed.status_code == 201


def test_enable_disable(env: Env):
    gen = env.get("/v1/hosts/ent-az1-000").json()["generation"]
    resp = env.post("/v1/hosts/ent-az1-000/disable", who="operator").json()
    assert resp["enabled"] is False
    assert resp["generation"] == gen + 1
    for _ in range(5):
        placed = env.post("/v1/placements", {"flavor": "c3.large", "pool": "enterprise"}).json()
        assert placed["instances"][0]["host"] != "ent-az1-000"
    assert env.post("/v1/hosts/ent-az1-000/enable").json()["enabled"] is True
    assert error(env.post("/v1/hosts/nope/disable"))["code"] == "not_found"


def test_reports_and_reconcile(env: Env):
    path = "/v1/hosts/std-az1-000/reports"
    resp = env.post(path, {"timestamp": DEMO_NOW + 30, "instances": ["ghost"]}, "operator")
    assert resp.json() == {"applied": True, "host": "std-az1-000", "last_heartbeat": DEMO_NOW + 30}
    old = env.post(path, {"timestamp": DEMO_NOW + 10})
    assert old.json()["applied"] is False
    assert old.json()["last_heartbeat"] == DEMO_NOW + 30
    assert error(env.post(path, {"timestamp": -1}))["field"] == "body.timestamp"
    assert error(env.post(path, {"timestamp": "soon"}))["field"] == "body.timestamp"
    assert error(env.post("/v1/hosts/nope/reports", {"timestamp": 1}))["code"] == "not_found"
    [ev] = env.post("/v1/reconcile").json()
    assert ev["kind"] == "discrepancy"
    assert ev["payload"]["unknown_to_berth"] == ["ghost"]
    assert env.post("/v1/reconcile").json() == []


def test_stale_heartbeat_stops_placements(env: Env):
    """Hosts whose heartbeat is older than service_down_time get nothing (compute filter); a
    fresh report brings one back at once."""
    table = env.replica.clusters["az1"].table
    gpus = [n for n in table.names if n.startswith("gpu-")]
    for name in gpus:
        table.heartbeat[table.index[name]] = DEMO_NOW - 3600
    resp = env.post("/v1/placements", {"flavor": "gn3.4xlarge", "cluster": "az1"})
    assert resp.status_code == 409
    reasons = {r["code"] for r in error(resp)["details"]["clusters"]["az1"]["reasons"]}
    assert "host_down" in reasons
    alive = gpus[0]
    report = env.post(f"/v1/hosts/{alive}/reports", {"timestamp": DEMO_NOW}, "operator")
    assert report.json()["applied"] is True
    placed = env.post("/v1/placements", {"flavor": "gn3.4xlarge", "cluster": "az1"})
    assert placed.status_code == 201, placed.text
    assert placed.json()["instances"][0]["host"] == alive


# ---------------------------------------------------------------------------- catalogue
def test_flavors(env: Env):
    assert len(env.get("/v1/flavors", "alpha").json()) == 60
    assert env.get("/v1/flavors/c3.large", "alpha").json()["vcpus"] == 2
    assert error(env.get("/v1/flavors/nope"))["code"] == "not_found"
    body = {"name": "t1.small", "vcpus": 1, "memory_mb": 512}
    assert env.post("/v1/flavors", body, "alpha").status_code == 403
    assert env.post("/v1/flavors", body, "operator").status_code == 201
    assert env.post("/v1/placements", {"flavor": "t1.small"}, "alpha").status_code == 201
    bad = {"name": "t1.bad", "vcpus": 1, "memory_mb": 512, "extra_specs": {"hw:numa_nodes": "7"}}
    err = error(env.post("/v1/flavors", bad))
    assert err["code"] == "invalid_input"
    assert "hw:numa_nodes" in err["message"]
    assert error(env.post("/v1/flavors", {"name": "t", "vcpus": 0, "memory_mb": 1}))["field"] == (
        "body.vcpus"
    )
    assert error(env.delete("/v1/flavors/t1.small"))["code"] == "in_use"
    assert env.delete("/v1/flavors/c3.8xlarge").status_code == 204
    assert error(env.post("/v1/placements", {"flavor": "c3.8xlarge"}))["code"] == "unknown_flavor"


def test_images_and_networks(env: Env):
    image = {"name": "centos9", "architecture": "x86_64", "clusters": ["az2"]}
    assert env.post("/v1/images", image, "operator").status_code == 201
    assert env.get("/v1/images/centos9", "alpha").json()["clusters"] == ["az2"]
    assert [i["name"] for i in env.get("/v1/images").json()] == ["centos9"]
    assert error(env.get("/v1/images/nope"))["code"] == "not_found"
    placed = env.post("/v1/placements", {"flavor": "c3.large", "image": "centos9"}).json()
    assert placed["cluster"] == "az2"
    assert error(env.post("/v1/placements", {"flavor": "c3.large", "image": "nope"}))["field"] == (
        "image"
    )
    net = {"name": "net-az1", "cluster": "az1", "cidr": "10.1.0.0/16", "total": 65000}
    assert env.post("/v1/networks", net, "operator").status_code == 201
    assert env.get("/v1/networks").json()[0]["total"] == 65000
    assert error(env.post("/v1/networks", dict(net, cidr="nope")))["field"] == "body.cidr"
    assert error(env.post("/v1/networks", net))["code"] == "already_exists"


# ---------------------------------------------------------------------------- deployment sets
def test_deployment_sets_are_strict_and_per_project(env: Env):
    body = {"id": "db-alpha", "max_size": 3}
    resp = env.post("/v1/deployment-sets", body, "alpha")
    assert resp.status_code == 201
    assert resp.json()["project"] == "project-1"
    assert env.get("/v1/deployment-sets/db-alpha", "beta").status_code == 404
    assert [s["id"] for s in env.get("/v1/deployment-sets", "beta").json()] == []
    placed = env.post(
        "/v1/placements", {"flavor": "g3.large", "count": 3, "deployment_set": "db-alpha"}, "alpha"
    ).json()
    hosts = [i["host"] for i in placed["instances"]]
    assert len(set(hosts)) == 3
    assert env.get("/v1/deployment-sets/db-alpha", "alpha").json()["members"] == 3
    full = env.post("/v1/placements", {"flavor": "g3.large", "deployment_set": "db-alpha"}, "alpha")
    assert error(full)["details"]["reason"] == "deployment_set_full"
    other = env.post("/v1/placements", {"flavor": "g3.large", "deployment_set": "db-alpha"}, "beta")
    assert error(other)["code"] == "unknown_deployment_set"
    assert error(env.delete("/v1/deployment-sets/db-alpha", "alpha"))["code"] == "in_use"
    for iid in [i["id"] for i in placed["instances"]]:
        assert env.delete(f"/v1/instances/{iid}", "alpha").status_code == 204
    assert env.delete("/v1/deployment-sets/db-alpha", "beta").status_code == 404
    assert env.delete("/v1/deployment-sets/db-alpha", "alpha").status_code == 204
    assert audit(env.store) == []


def test_anti_affinity_request_larger_than_the_pool_fails_whole(env: Env):
    env.post("/v1/deployment-sets", {"id": "gpu-set"}, "operator")
    before = len(env.get("/v1/instances").json())
    resp = env.post(
        "/v1/placements",
        {"flavor": "gn3.4xlarge", "count": 9, "deployment_set": "gpu-set", "cluster": "az1"},
    )
    assert resp.status_code == 409
    err = error(resp)
    assert err["code"] == "no_valid_host"
    assert "anti-affinity" in err["message"] or "hosts fit" in err["message"]
    assert len(env.get("/v1/instances").json()) == before


# ---------------------------------------------------------------------------- placements
def test_placement_happy_path_and_readback(env: Env):
    resp = env.post("/v1/placements", {"flavor": "c3.4xlarge.numa1", "count": 2}, "alpha")
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["project"] == "project-1"
    assert len(body["instances"]) == 2
    inst = body["instances"][0]
    assert inst["cells"][0]["pcpus"] == 16
    assert inst["host_use"]["hdd_gb"] == 40
    assert body["alternates"][inst["id"]]
    again = env.get(f"/v1/placements/{body['id']}", "alpha").json()
    assert {i["id"] for i in again["instances"]} == {i["id"] for i in body["instances"]}
    assert env.get(f"/v1/placements/{body['id']}", "beta").status_code == 404
    host = env.get(f"/v1/hosts/{inst['host']}").json()
    assert host["usage"]["pinned_cpus_used"] >= 16


def test_failed_placement_returns_the_diagnosis_and_writes_nothing(env: Env):
    events = env.get("/v1/events", params={"limit": 10000}).json()
    resp = env.post("/v1/placements", {"flavor": "gn3.4xlarge", "count": 40})
    assert resp.status_code == 409
    err = error(resp)
    assert err["code"] == "no_valid_host"
    assert err["message"].startswith("az")
    diag = err["details"]["clusters"]["az1"]
    assert diag["total_hosts"] == 91
    assert sum(r["hosts"] for r in diag["reasons"]) == 91
    assert env.get("/v1/events", params={"limit": 10000}).json() == events


def test_placement_bad_input_names_the_field(env: Env):
    cases = [
        ({"flavor": "c3.large", "count": 0}, "body.count"),
        ({"flavor": "c3.large", "count": "many"}, "body.count"),
        ({"count": 1}, "body.flavor"),
        ({"flavor": "c3.large", "colour": "red"}, "body.colour"),
        ({"flavor": "c3.large\u0000"}, "body.flavor"),
        ({"flavor": "c3.large", "business_type": "free"}, "body.business_type"),
        ({"flavor": "nope"}, "flavor"),
        ({"flavor": "c3.large", "region": "nowhere"}, "region"),
        ({"flavor": "c3.large", "cluster": "nowhere"}, "cluster"),
        ({"flavor": "c3.large", "deployment_set": "nope"}, "deployment_set"),
    ]
    for body, field in cases:
        resp = env.post("/v1/placements", body)
        assert resp.status_code == 422, (body, resp.text)
        assert error(resp)["field"] == field, body
    assert error(env.client.post("/v1/placements", content=b"{", headers=env.h("admin")))[
        "code"
    ] == ("invalid_input")


def test_tenant_cannot_place_for_another_project(env: Env):
    resp = env.post("/v1/placements", {"flavor": "c3.large", "project": "project-2"}, "alpha")
    assert resp.status_code == 403
    assert error(resp)["field"] == "project"
    assert env.post("/v1/placements", {"flavor": "c3.large"}, "reader").status_code == 403


def test_idempotency_key_never_places_twice(env: Env):
    key = {"Idempotency-Key": "order-42"}
    first = env.post("/v1/placements", {"flavor": "c3.xlarge", "count": 2}, "alpha", headers=key)
    assert first.status_code == 201
    count = len(env.get("/v1/instances", "alpha").json())
    for _ in range(3):
        again = env.post(
            "/v1/placements", {"flavor": "c3.xlarge", "count": 2}, "alpha", headers=key
        )
        assert again.status_code == 201
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
    assert len(env.get("/v1/instances", "alpha").json()) == count
    other = env.post("/v1/placements", {"flavor": "c3.large"}, "alpha", headers=key)
    assert error(other)["code"] == "idempotency_key_reused"
    # another token's key space is its own
    own = env.post("/v1/placements", {"flavor": "c3.xlarge", "count": 2}, "beta", headers=key)
    assert own.status_code == 201
    assert own.json()["id"] != first.json()["id"]
    bad = env.post("/v1/placements", {"flavor": "c3.large"}, headers={"Idempotency-Key": "a b"})
    assert bad.status_code == 422


def test_preemption_evicts_preemptible_instances_for_on_demand(env: Env):
    # fill the GPU hosts of az1 with preemptible GPU guests, then ask for an on-demand one
    while True:
        resp = env.post(
            "/v1/placements",
            {"flavor": "gn3.4xlarge", "cluster": "az1", "business_type": "preemptible"},
        )
        if resp.status_code != 201:
            break
    assert error(resp)["code"] == "no_valid_host"
    placed = env.post("/v1/placements", {"flavor": "gn3.4xlarge", "cluster": "az1"})
    assert placed.status_code == 201, placed.text
    body = placed.json()
    assert len(body["evicted"]) == 1
    evictions = env.get("/v1/evictions").json()
    assert evictions[-1]["instance_id"] == body["evicted"][0]
    assert evictions[-1]["placement_id"] == body["id"]
    assert env.get(f"/v1/instances/{body['evicted'][0]}").status_code == 404
    assert audit(env.store) == []


# ---------------------------------------------------------------------------- instances
def test_tenants_see_and_delete_only_their_own_instances(env: Env):
    mine = env.post("/v1/placements", {"flavor": "c3.large"}, "alpha").json()["instances"][0]
    theirs = env.post("/v1/placements", {"flavor": "c3.large"}, "beta").json()["instances"][0]
    listed = env.get("/v1/instances", "alpha").json()
    assert {i["project"] for i in listed} == {"project-1"}
    assert env.get("/v1/instances", "alpha", params={"project": "project-2"}).json() == []
    assert env.get(f"/v1/instances/{theirs['id']}", "alpha").status_code == 404
    assert env.delete(f"/v1/instances/{theirs['id']}", "alpha").status_code == 404
    assert env.get(f"/v1/instances/{theirs['id']}", "beta").status_code == 200
    assert env.delete(f"/v1/instances/{mine['id']}", "reader").status_code == 403
    assert env.delete(f"/v1/instances/{mine['id']}", "alpha").status_code == 204
    assert env.get(f"/v1/instances/{mine['id']}", "alpha").status_code == 404
    assert env.delete(f"/v1/instances/{mine['id']}", "alpha").status_code == 404


def test_instances_list_filters_and_pages(env: Env):
    page1 = env.get("/v1/instances", params={"limit": 100}).json()
    page2 = env.get("/v1/instances", params={"limit": 100, "after": page1[-1]["id"]}).json()
    assert len(page1) == 100
    assert page2[0]["id"] > page1[-1]["id"]
    on_host = env.get("/v1/instances", params={"host": page1[0]["host"]}).json()
    assert all(i["host"] == page1[0]["host"] for i in on_host)
    assert error(env.get("/v1/instances", params={"limit": 0}))["field"] == "query.limit"


def test_delete_releases_capacity(env: Env):
    before = env.get("/v1/capacity", params={"flavor": "m3.4xlarge", "by": "fleet"}).json()
    inst = env.post("/v1/placements", {"flavor": "m3.4xlarge"}).json()["instances"][0]
    during = env.get("/v1/capacity", params={"flavor": "m3.4xlarge", "by": "fleet"}).json()
    assert during["counts"]["fleet"]["m3.4xlarge"] == before["counts"]["fleet"]["m3.4xlarge"] - 1
    assert env.delete(f"/v1/instances/{inst['id']}", "operator").status_code == 204
    after = env.get("/v1/capacity", params={"flavor": "m3.4xlarge", "by": "fleet"}).json()
    assert after["counts"] == before["counts"]


# ---------------------------------------------------------------------------- evictions
def test_operator_evictions(env: Env):
    inst = env.post("/v1/placements", {"flavor": "c3.large"}, "alpha").json()["instances"][0]
    body = {"instance_id": inst["id"], "reason": "host maintenance"}
    assert env.post("/v1/evictions", body, "alpha").status_code == 403
    resp = env.post("/v1/evictions", body, "operator")
    assert resp.status_code == 201
    assert resp.json()["reason"] == "host maintenance"
    assert [e["instance_id"] for e in env.get("/v1/evictions", "alpha").json()] == [inst["id"]]
    assert env.get("/v1/evictions", "beta").json() == []
    assert error(env.post("/v1/evictions", body))["code"] == "not_found"


# ---------------------------------------------------------------------------- reads
@pytest.mark.parametrize("by", ["fleet", "region", "cluster", "pool", "host"])
def test_capacity_groupings_add_up(env: Env, by: str):
    flavors = ["c3.large", "gn3.4xlarge"]
    body = env.get("/v1/capacity", params={"flavor": flavors, "by": by}).json()
    total = env.get("/v1/capacity", params={"flavor": flavors, "by": "fleet"}).json()
    for f in flavors:
        assert sum(g[f] for g in body["counts"].values()) == total["counts"]["fleet"][f]
    assert total["counts"]["fleet"]["gn3.4xlarge"] > 0


def test_capacity_bad_input(env: Env):
    assert error(env.get("/v1/capacity", params={"by": "planet"}))["field"] == "query.by"
    assert error(env.get("/v1/capacity", params={"flavor": "nope"}))["field"] == "flavor"


def test_stats(env: Env):
    env.post("/v1/placements", {"flavor": "c3.large"})
    env.post("/v1/placements", {"flavor": "gn3.4xlarge", "count": 90})
    [day] = env.get("/v1/stats").json()
    assert day["requests"] == 2
    assert day["successes"] == 1
    assert day["success_rate"] == 0.5
    assert sum(day["failures"].values()) == 1
    assert error(env.get("/v1/stats", params={"days": 0}))["field"] == "query.days"


def test_events_tail(env: Env):
    last = env.get("/healthz").json()["last_event_id"]
    inst = env.post("/v1/placements", {"flavor": "c3.large"}).json()["instances"][0]
    env.delete(f"/v1/instances/{inst['id']}")
    evs = env.get("/v1/events", params={"after": last}).json()
    assert [e["kind"] for e in evs] == ["instance_claimed", "instance_released"]
    assert evs[1]["generation"] == evs[0]["generation"] + 1
    assert env.get("/v1/events", params={"after": last, "kind": "instance_released"}).json() == [
        evs[1]
    ]
    assert error(env.get("/v1/events", params={"after": -1}))["field"] == "query.after"


def test_tokens(env: Env):
    assert env.get("/v1/tokens", "operator").status_code == 403
    resp = env.post("/v1/tokens", {"name": "ci", "role": "tenant", "project": "p9"})
    assert resp.status_code == 201
    token = resp.json()
    assert token["token"].startswith("berth_")
    assert all(t["token"] is None for t in env.get("/v1/tokens").json())
    headers = {"Authorization": f"Bearer {token['token']}"}
    assert env.client.get("/v1/instances", headers=headers).status_code == 200
    assert env.delete(f"/v1/tokens/{token['id']}").status_code == 204
    assert env.client.get("/v1/instances", headers=headers).status_code == 401
    assert error(env.post("/v1/tokens", {"name": "x", "role": "tenant"}))["field"] == "project"
    assert error(env.post("/v1/tokens", {"name": "x", "role": "god"}))["field"] == "body.role"


def test_cached_tokens_need_no_lookup_and_revocation_is_bounded(
    demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """With a token cache, a known token is answered without the database; revoking it stops
    it at once on the replica that revoked it, and on another replica once its cache expires."""
    db = tmp_path / "berth.db"
    shutil.copy(demo_db, db)
    a = make_env(db, replica_id="r1", token_cache_ttl=60.0)
    b = make_env(db, replica_id="r2", token_cache_ttl=0.5)
    try:
        row, secret = a.store.create_token("cached", "reader")
        headers = {"Authorization": f"Bearer {secret}"}
        assert a.client.get("/v1/regions", headers=headers).status_code == 200
        assert b.client.get("/v1/regions", headers=headers).status_code == 200
        lookups: list[str] = []
        real = a.store.lookup_token

        def counting_lookup(secret: str) -> TokenRow | None:
            lookups.append(secret)
            return real(secret)

        monkeypatch.setattr(a.store, "lookup_token", counting_lookup)
        for _ in range(3):
            assert a.client.get("/v1/regions", headers=headers).status_code == 200
        assert lookups == []  # the cache answered
        assert a.delete(f"/v1/tokens/{row.id}").status_code == 204
        assert a.client.get("/v1/regions", headers=headers).status_code == 401  # at once here
        assert b.client.get("/v1/regions", headers=headers).status_code == 200  # cached there
        time.sleep(0.6)
        assert b.client.get("/v1/regions", headers=headers).status_code == 401
    finally:
        a.store.close()
        b.store.close()


def test_a_database_outage_is_a_503_not_a_500(env: Env, monkeypatch: pytest.MonkeyPatch):
    from sqlalchemy.exc import OperationalError

    def down(*_a: object, **_k: object) -> None:
        raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    monkeypatch.setattr(env.store, "list_regions", down)
    resp = env.get("/v1/regions")
    assert resp.status_code == 503
    assert error(resp)["code"] == "database_unavailable"
    monkeypatch.setattr(env.store, "latest_event_id", down)
    assert env.client.get("/healthz").status_code == 503


def test_remove_host(env: Env):
    busy = env.get("/v1/instances", params={"limit": 1}).json()[0]["host"]
    assert error(env.delete(f"/v1/hosts/{busy}"))["code"] == "in_use"
    assert env.post("/v1/hosts", HOST_BODY, "operator").status_code == 201
    assert env.delete(f"/v1/hosts/{HOST_BODY['name']}", "reader").status_code == 403
    assert env.delete(f"/v1/hosts/{HOST_BODY['name']}", "operator").status_code == 204
    assert env.get(f"/v1/hosts/{HOST_BODY['name']}").status_code == 404
    assert HOST_BODY["name"] not in env.replica.host_cluster
    assert error(env.delete("/v1/hosts/nope"))["code"] == "not_found"
    assert env.get("/healthz").json()["hosts"] == 270


def test_placements_can_take_ips_from_a_network(env: Env):
    net = {"name": "net-az3", "cluster": "az3", "cidr": "10.3.0.0/24", "total": 3}
    assert env.post("/v1/networks", net, "operator").status_code == 201
    placed = env.post("/v1/placements", {"flavor": "c3.large", "count": 2, "network": "net-az3"})
    assert placed.status_code == 201, placed.text
    assert placed.json()["cluster"] == "az3"
    assert env.get("/v1/networks").json()[0]["used"] == 2
    too_many = env.post("/v1/placements", {"flavor": "c3.large", "count": 2, "network": "net-az3"})
    assert error(too_many)["details"]["reason"] == "insufficient_ips"
    wrong = env.post(
        "/v1/placements", {"flavor": "c3.large", "network": "net-az3", "cluster": "az1"}
    )
    assert error(wrong)["field"] == "network"
    unknown = env.post("/v1/placements", {"flavor": "c3.large", "network": "nope"})
    assert error(unknown)["field"] == "network"
    env.delete(f"/v1/instances/{placed.json()['instances'][0]['id']}")
    assert env.get("/v1/networks").json()[0]["used"] == 1
