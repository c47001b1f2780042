"""The multi-cloud pipeline through the service (`berth serve --policy`), on the policy demo."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from berth.policy.demo import shipped_path
from berth.policy.loader import load_policy, load_topology
from berth.policy.model import Policy, TopologySpec
from berth.policy.outcome import ScheduleRequest
from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.placing.multicloud import PolicyFailureError, schedule
from berth.service.policy_topology import attach_policy, load_topology_into, policy_engine
from berth.service.replica import Replica
from berth.store.audit import audit
from berth.store.repo import Store
from tests.service.conftest import Env, db_url, pg_url

__all__ = ["db_url", "pg_url"]

POLICY: Policy = load_policy(shipped_path("demo-policy.yaml"))
TOPOLOGY: TopologySpec = load_topology(shipped_path("demo-topology.yaml"))
NOW = TOPOLOGY.now or 0.0


@pytest.fixture(scope="session")
def policy_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "berth.db"
    store = Store.open(f"sqlite:///{path}")
    load_topology_into(store, POLICY, TOPOLOGY)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def policy_env(db: Path, replica_id: str = "p1") -> Env:
    store = Store.open(f"sqlite:///{db}", replica=replica_id)
    config = ServiceConfig(
        db_url=str(store.engine.url), replica_id=replica_id, token_cache_ttl=0, policy=POLICY
    )
    app = create_app(config, store=store, clock=lambda: NOW, background=False)
    tokens = {
        "admin": store.create_token("admin", "admin")[1],
        "alpha": store.create_token("alpha", "tenant", "project-1")[1],
        "reader": store.create_token("ro", "reader")[1],
    }
    return Env(app, TestClient(app), store, app.state.replica, tokens)


@pytest.fixture
def penv(policy_db: Path, tmp_path: Path) -> Iterator[Env]:
    db = tmp_path / "berth.db"
    shutil.copy(policy_db, db)
    env = policy_env(db)
    yield env
    env.store.close()


def test_schedule_runs_the_pipeline_and_commits(penv: Env):
    nets = {n["name"]: n["used"] for n in penv.get("/v1/networks").json()}
    resp = penv.post("/v1/schedule", {"region": "beijing", "flavor": "v.c3.large", "count": 2})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["idc"] in ("bj-yz", "bj-zw")
    assert body["variant"] in body["candidates"]
    assert body["flavor"].startswith("v.c3.large")
    assert len(body["instances"]) == 2
    used = {n["name"]: n["used"] for n in penv.get("/v1/networks").json()}
    assert used[body["network"]] == nets[body["network"]] + 2
    inst = penv.get(f"/v1/instances/{body['instances'][0]['id']}").json()
    assert inst["flavor"] == body["flavor"]
    assert inst["business_type"] == "on-demand"
    assert audit(penv.store) == []
    # released instances give their IP back
    penv.delete(f"/v1/instances/{inst['id']}")
    again = {n["name"]: n["used"] for n in penv.get("/v1/networks").json()}
    assert again[body["network"]] == nets[body["network"]] + 1


def test_schedule_tenant_and_deployment_set_created_on_use(penv: Env):
    body = {"region": "shanghai", "flavor": "v.c3.large", "count": 3, "deployment_set": "cache"}
    resp = penv.post("/v1/schedule", body, "alpha")
    assert resp.status_code == 201, resp.text
    hosts = [i["host"] for i in resp.json()["instances"]]
    assert len(set(hosts)) == 3
    assert resp.json()["project"] == "project-1"
    [ds] = [d for d in penv.get("/v1/deployment-sets", "alpha").json() if d["id"] == "cache"]
    assert ds["members"] == 3
    assert ds["max_size"] == POLICY.deployment_sets.max_size
    assert penv.post("/v1/schedule", body, "reader").status_code == 403


def test_schedule_failures_are_explained(penv: Env):
    resp = penv.post("/v1/schedule", {"region": "beijing", "flavor": "v.g3.8xlarge", "count": 100})
    if resp.status_code == 422:  # not a base flavor of the demo: any big one will do
        resp = penv.post(
            "/v1/schedule",
            {"region": "beijing", "flavor": POLICY.flavors[-1].name, "count": 100},
        )
    assert resp.status_code in (409, 422), resp.text
    err = resp.json()["error"]
    assert err["details"]["step"]
    assert err["message"]
    bad = penv.post("/v1/schedule", {"region": "mars", "flavor": "v.c3.large"})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "region"
    unknown = penv.post("/v1/schedule", {"region": "beijing", "flavor": "nope"})
    assert unknown.status_code == 422


def test_schedule_idempotency(penv: Env):
    key = {"Idempotency-Key": "sched-1"}
    body = {"region": "guangzhou", "flavor": "v.c3.large"}
    first = penv.post("/v1/schedule", body, headers=key)
    assert first.status_code == 201, first.text
    count = len(penv.get("/v1/instances", params={"limit": 10000}).json())
    again = penv.post("/v1/schedule", body, headers=key)
    assert again.json() == first.json()
    assert len(penv.get("/v1/instances", params={"limit": 10000}).json()) == count


def test_the_other_replica_engine_follows_by_events(penv: Env, tmp_path: Path):
    other = policy_env(tmp_path / "berth.db", replica_id="p2")
    try:
        resp = penv.post(
            "/v1/schedule",
            {"region": "beijing", "flavor": "v.c3.large", "business": "preemptible"},
        )
        assert resp.status_code == 201, resp.text
        body = resp.json()
        iid = body["instances"][0]["id"]
        r2 = other.replica
        engine = policy_engine(r2)
        assert engine is not None
        before = engine.topology.clusters[body["cluster"]].networks[body["network"]]
        assert r2.sync() >= 1
        cluster = engine.topology.clusters[body["cluster"]]
        assert cluster.meta[iid].business.value == "preemptible"
        assert cluster.networks[body["network"]] == before - 1
        assert iid in cluster.preemptible_by_host[body["instances"][0]["host"]]
    finally:
        other.store.close()


def test_without_a_policy_schedule_says_so(env: Env):
    resp = env.post("/v1/schedule", {"region": "idc-north", "flavor": "c3.large"})
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "policy_not_configured"


@pytest.mark.parametrize("by", ["region", "idc", "cluster", "pool", "host", "flavor"])
def test_capacity_report_by_variant(penv: Env, by: str):
    resp = penv.get("/v1/capacity/report", params={"flavor": "v.c3.large", "by": by})
    assert resp.status_code == 200, resp.text
    counts = resp.json()["counts"]
    assert counts
    total = penv.get("/v1/capacity/report", params={"flavor": "v.c3.large", "by": "flavor"})
    per_variant = total.json()["counts"]["v.c3.large"]
    if by != "flavor":
        summed: dict[str, int] = {}
        for group in counts.values():
            for flavor, n in group.items():
                summed[flavor] = summed.get(flavor, 0) + n
        assert sum(summed.values()) == sum(per_variant.values())
    bad = penv.get("/v1/capacity/report", params={"flavor": "nope"})
    assert bad.status_code == 422
    assert penv.get("/v1/capacity/report", "alpha").status_code == 403


@pytest.mark.slow
def test_stale_replicas_keep_a_rack_scoped_set_apart(db_url: str):
    """Two replicas schedule into the demo's rack-scoped set without syncing in between: the
    set's generation makes the stale one catch up, so no rack holds two members."""

    loader = Store.open(db_url, replica="loader")
    load_topology_into(loader, POLICY, TOPOLOGY)
    loader.close()
    replicas = []
    for name in ("a", "b"):
        config = ServiceConfig(db_url=db_url, replica_id=name, policy=POLICY)
        r = Replica(Store.open(db_url, replica=name, migrate=False), config, lambda: NOW)
        attach_policy(r)
        r.reload()
        replicas.append(r)
    a, b = replicas
    try:
        [ds] = [d for d in TOPOLOGY.deployment_sets if d.scope.value == "rack"]
        members = len(a.store.list_instances(server_group=ds.name))
        request = ScheduleRequest(region="beijing", flavor="v.c3.large", deployment_set=ds.name)
        placed = retried = 0
        for r in (a, b, a, b):
            if members + placed >= ds.max_size:
                break
            try:
                done = schedule(r, request)
            except PolicyFailureError:  # the region ran out of racks for the set
                break
            placed += 1
            retried += done.attempts > 1
        assert placed >= 2
        assert retried >= 1  # the stale replica lost the race on the set's generation once
        rows = a.store.list_instances(server_group=ds.name)
        racks: dict[tuple[str, str | None], list[str]] = {}
        for row in rows:
            host = a.store.get_host(row.host).host
            racks.setdefault((row.cluster, host.rack), []).append(row.id)
        assert all(len(ids) == 1 for ids in racks.values()), racks
        assert audit(a.store) == []
    finally:
        for r in replicas:
            r.store.close()


def test_the_preemptible_limit_holds_across_stale_replicas(policy_db: Path, tmp_path: Path):
    """Two replicas that do not sync race for the IDC's last preemptible slots: the stale one
    loses (on a host's generation, or on the IDC count re-checked in the commit), catches up,
    and the engine then refuses; the limit is never passed."""

    db = tmp_path / "berth.db"
    shutil.copy(policy_db, db)
    a, b = policy_env(db, "a"), policy_env(db, "b")
    try:
        idc = "gz-th"
        limit = POLICY.preemptible_limits.idcs[idc]

        def count() -> int:
            clusters = [
                c.name
                for r in TOPOLOGY.regions
                for i in r.idcs
                if i.name == idc
                for c in i.clusters
            ]
            return sum(
                1
                for i in a.store.list_instances(limit=100_000)
                if i.cluster in clusters and i.preemptible
            )

        request = ScheduleRequest(region=idc, flavor="v.c3.large", business="preemptible")
        b.replica.reload()
        while count() < limit - 1:
            schedule(a.replica, request)
        # b has not seen any of those: it believes there is room for several more
        outcomes = []
        for r in (a.replica, b.replica, b.replica):
            try:
                schedule(r, request)
                outcomes.append("placed")
            except PolicyFailureError as exc:
                outcomes.append(exc.failure.code)
        assert outcomes == ["placed", "preemptible_limit", "preemptible_limit"]
        assert count() == limit
    finally:
        a.store.close()
        b.store.close()


def test_elastic_vms_are_their_own_business_type_in_the_policy_engine(penv: Env):
    """An elastic VM — scheduled through /v1/schedule, or placed by the elastic loop through
    Berth's plain placement — is known to the policy engine as `elastic`: evictable by
    on-demand requests, not counted against the preemptible limit."""
    resp = penv.post(
        "/v1/schedule", {"region": "beijing", "flavor": "v.c3.large", "business": "elastic"}
    )
    assert resp.status_code == 201, resp.text
    body = resp.json()
    (inst,) = body["instances"]
    assert (inst["business_type"], inst["preemptible"]) == ("elastic", True)
    engine = policy_engine(penv.replica)
    assert engine is not None
    cluster = engine.topology.clusters[body["cluster"]]
    assert cluster.meta[inst["id"]].business.value == "elastic"
    assert cluster.is_preemptible(cluster.table.allocations[inst["id"]])
    idc = cluster.idc
    before = engine.topology.preemptible_count(idc)
    # the elastic loop's way (berth.service.elastic.carry): plain placement, type elastic
    placed = penv.post(
        "/v1/placements",
        {
            "flavor": body["flavor"],
            "project": "elastic",
            "cluster": body["cluster"],
            "business_type": "elastic",
        },
    )
    assert placed.status_code == 201, placed.text
    iid = placed.json()["instances"][0]["id"]
    penv.replica.sync()
    assert cluster.meta[iid].business.value == "elastic"  # not taken for on-demand
    assert cluster.is_preemptible(cluster.table.allocations[iid])
    assert engine.topology.preemptible_count(idc) == before
