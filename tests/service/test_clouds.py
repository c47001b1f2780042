"""Berth driving clouds through the real app: join and leave, boots on the chosen host with
alternates, the change feed and the full reconcile, defrag as live migrations, restarts mid-boot.
The cloud is `SimulatedCloud` (an in-process `CloudDriver`); tests/openstack/ runs the same
paths against real Nova and Placement."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.cloud.driver import BootRequest
from berth.core.model import GroupPolicy, Instance, ServerGroup
from berth.service.placing.plain import PlaceArgs, choose, place
from tests.service.cloudenv import CloudEnv, cloud_fleet, make_cloud_env, servers


@pytest.fixture
def env(tmp_path: Path) -> Iterator[CloudEnv]:
    e = make_cloud_env(f"sqlite:///{tmp_path / 'berth.db'}")
    yield e
    e.close()


@pytest.fixture
def any_env(db_url: str) -> Iterator[CloudEnv]:
    """The same, on SQLite and on PostgreSQL."""
    e = make_cloud_env(db_url)
    yield e
    e.close()


def test_join_imports_the_inventory_and_leaving_keeps_the_servers(any_env: CloudEnv):
    env = any_env
    cloud = env.join("c1", cloud_fleet("c1", n=3, instances=2))
    listed = {c["name"]: c for c in env.get("/v1/clusters").json()}
    assert listed["c1"]["hosts"] == 3
    assert listed["c1"]["driver"]["kind"] == "simulated"
    assert listed["c1"]["driver"]["state"] == "joined"
    assert listed["c1"]["driver"]["config"]["fleet"] == "3 hosts"  # summarised, not echoed
    assert env.claims("c1") == servers(cloud)  # the running servers became instances
    one = env.get("/v1/instances/c1-old-0").json()
    assert one["server"]["state"] == "active"
    assert one["server"]["server_id"]
    # capacity: Berth's free vCPUs and memory equal the cloud's inventory less its servers
    r = env.place("c1", 2)
    assert r.status_code == 201, r.text
    # leaving: no more placements there; the servers and Berth's claims stay
    before = servers(cloud)
    r = env.delete("/v1/clusters/c1")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "left"
    assert r.json()["driver"]["state"] == "leaving"
    assert servers(cloud) == before
    assert env.claims("c1") == before
    r = env.place("c1", 1)
    assert r.status_code == 409
    assert "cluster has left" in r.text
    assert env.clouds.registry.get("c1") is None


def test_join_refuses_bad_input_and_changes_nothing(env: CloudEnv):
    fleet = cloud_fleet("c1")
    body: dict[str, Any] = {
        "name": "c1",
        "region": "nowhere",
        "driver": {"kind": "simulated", "config": {}},
    }
    r = env.post("/v1/clusters", body)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "driver.config.cloud"
    body["driver"]["config"] = {"cloud": "x", "password": "hunter2", "fleet": {}}
    r = env.post("/v1/clusters", body)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "driver.config.password"
    body["driver"]["config"] = {"cloud": "x", "fleet": fleet.model_dump(mode="json")}
    r = env.post("/v1/clusters", body)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "region"
    assert env.store.list_clusters() == []
    assert env.store.list_clouds() == []
    env.join("c1", fleet)
    r = env.post("/v1/clusters", {**body, "region": "r1", "name": "c2"})  # same host names
    assert r.status_code == 409
    assert "c1-h-0" in r.text
    assert [c.name for c in env.store.list_clusters()] == ["c1"]


def test_boots_land_on_the_chosen_hosts(any_env: CloudEnv):
    env = any_env
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    r = env.place("c1", 4)
    assert r.status_code == 201, r.text
    chosen = {i["id"]: i["host"] for i in r.json()["instances"]}
    assert servers(cloud) == chosen == env.claims("c1")
    assert {i["server"]["state"] for i in r.json()["instances"]} == {"building"} or {
        i["server"]["state"] for i in r.json()["instances"]
    } == {"active"}
    env.clouds.poll("c1")
    for iid, h in chosen.items():
        got = env.get(f"/v1/instances/{iid}").json()
        assert got["host"] == h
        assert got["server"]["state"] == "active"


def _chosen(env: CloudEnv, seed: int) -> tuple[str, tuple[str, ...]]:
    """The host (and alternates) Berth's decision picks for one p4 with `seed` right now."""
    replica = env.app.state.replica
    replica.sync()
    with replica.lock:
        c = choose(replica, PlaceArgs("p4", 1, "default", cluster="c1", seed=seed))
    sel = c.decision.selections[0]
    return sel.host, sel.alternates


def test_a_refused_boot_falls_back_to_an_alternate(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    host, alternates = _chosen(env, seed=7)
    cloud.set_host_enabled(host, False)  # the cloud refuses; Berth has not heard yet
    r = env.place("c1", 1, seed=7)
    assert r.status_code == 201, r.text
    inst = r.json()["instances"][0]
    assert inst["host"] == alternates[0]
    assert inst["server"]["tried"] == [{"host": host, "error": f"refused: host {host} is disabled"}]
    assert servers(cloud) == {inst["id"]: alternates[0]} == env.claims("c1")


def test_a_failed_build_falls_back_and_leaves_no_error_server(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    host, alternates = _chosen(env, seed=3)
    cloud.fail_boots = 1
    r = env.place("c1", 1, seed=3)
    assert r.status_code == 201, r.text
    inst = r.json()["instances"][0]
    assert inst["host"] == alternates[0]
    assert inst["server"]["tried"][0]["host"] == host
    assert "simulated build failure" in inst["server"]["tried"][0]["error"]
    assert [s.name for s in cloud.servers()] == [inst["id"]]  # the ERROR server was deleted


def test_a_build_that_never_finishes_falls_back(tmp_path: Path):
    env = make_cloud_env(f"sqlite:///{tmp_path / 'berth.db'}", build_timeout=0.0)
    try:
        cloud = env.join("c1", cloud_fleet("c1", n=3), boot_seconds=3600)
        host, alternates = _chosen(env, seed=5)
        r = env.place("c1", 1, seed=5)
        assert r.status_code == 201, r.text
        iid = r.json()["instances"][0]["id"]
        assert r.json()["instances"][0]["server"]["state"] == "building"
        env.clouds.reconcile("c1")  # still building past the timeout: deleted, next alternate
        got = env.get(f"/v1/instances/{iid}").json()
        assert got["host"] == alternates[0]
        assert got["server"]["tried"] == [
            {"host": host, "error": "failed: still building after 0 s"}
        ]
        assert servers(cloud) == {iid: alternates[0]} == env.claims("c1")
    finally:
        env.close()


def test_no_host_boots_it_explained_failure_claims_released(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    env.place("c1", 1)
    kept = env.claims("c1")
    for i in range(3):
        cloud.set_host_enabled(f"c1-h-{i}", False)
    r = env.place("c1", 2)
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "boot_failed"
    tried = next(iter(err["details"]["instances"].values()))
    assert len(tried) == 3
    assert all(t["error"].startswith("refused: host") for t in tried)
    assert env.claims("c1") == kept == servers(cloud)  # nothing of the placement is left
    failed = env.get("/v1/clusters/c1/servers?state=failed").json()
    assert len(failed) == 2
    assert all(f["fault"] for f in failed)


def test_delete_behind_berths_back_is_noticed_within_one_change(any_env: CloudEnv):
    env = any_env
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    env.place("c1", 3)
    env.clouds.poll("c1")
    victim = sorted(env.claims("c1"))[0]
    sid = env.store.get_server(victim).server_id
    assert sid is not None
    cloud.delete(sid)
    done = env.clouds.poll("c1")
    assert done.released == [victim]
    assert env.get(f"/v1/instances/{victim}").status_code == 404
    assert env.claims("c1") == servers(cloud)
    assert env.store.get_server(victim).state == "deleted"


def test_lost_changes_are_repaired_by_one_reconcile(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    env.place("c1", 3)
    env.clouds.poll("c1")
    a, b, _c = sorted(env.claims("c1"))
    cloud.delete(env.store.get_server(a).server_id or "")
    target = next(h for h in (f"c1-h-{i}" for i in range(3)) if h != env.claims("c1")[b])
    cloud.live_migrate(env.store.get_server(b).server_id or "", target)
    outsider = cloud.boot(BootRequest(name="outsider", flavor="s2", host="c1-h-0"))
    cloud.forget_changes()  # the notifications were lost: the feed says Resync
    done = env.clouds.poll("c1")
    assert done.released == [a]
    assert done.moved == [b]
    assert done.imported == ["outsider"]
    assert env.claims("c1") == servers(cloud)
    assert env.claims("c1")[b] == target
    got = env.get("/v1/instances/outsider").json()
    assert got["server"]["server_id"] == outsider.id
    assert got["flavor"] == "s2"


def test_migration_behind_berths_back_moves_the_claim(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    env.place("c1", 1)
    env.clouds.poll("c1")
    ((iid, src),) = env.claims("c1").items()
    target = next(f"c1-h-{i}" for i in range(3) if f"c1-h-{i}" != src)
    cloud.live_migrate(env.store.get_server(iid).server_id or "", target)
    assert env.clouds.poll("c1").moved == [iid]
    assert env.claims("c1") == {iid: target} == servers(cloud)


def test_a_server_reported_deleted_releases_its_claim(env: CloudEnv):
    """Nova's `instance.delete.start` arrives as the server in state DELETED, before it is gone."""
    from dataclasses import replace

    from berth.cloud.driver import ServerState
    from berth.service.clouds.reconcile import Repairs

    cloud = env.join("c1", cloud_fleet("c1", n=3))
    env.place("c1", 1)
    env.clouds.poll("c1")
    ((iid, _),) = env.claims("c1").items()
    (server,) = cloud.servers()
    out = Repairs()
    env.clouds.repair.server("c1", cloud, replace(server, state=ServerState.DELETED), out)
    assert out.released == [iid]
    assert env.claims("c1") == {}
    assert env.store.get_server(iid).state == "deleted"


def test_berth_delete_deletes_the_server(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    r = env.place("c1", 2)
    iid = r.json()["instances"][0]["id"]
    assert env.delete(f"/v1/instances/{iid}").status_code == 204
    assert iid not in servers(cloud)
    assert env.claims("c1") == servers(cloud)
    assert env.clouds.poll("c1").released == []  # the feed's ServerGone finds nothing to do


def test_a_defrag_plan_runs_as_live_migrations(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=4))
    # spread four p4 one per host, then ask for the capacity of a p8 back by emptying hosts
    for _i in range(4):
        r = env.place("c1", 1, different_host=list(env.claims("c1")))
        assert r.status_code == 201, r.text
    env.clouds.poll("c1")
    r = env.post(
        "/v1/defrag/plans",
        {
            "cluster": "c1",
            "target": {"objective": "empty-hosts"},
            "budget": {"max_migrations": 4, "max_concurrent": 2},
        },
    )
    assert r.status_code == 201, r.text
    plan = r.json()
    assert plan["migrations"] > 0
    auto = env.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    assert auto.status_code == 422  # the cloud confirms the steps, not the service
    assert auto.json()["error"]["field"] == "auto_confirm"
    assert env.post(f"/v1/defrag/plans/{plan['id']}/execute", {}).status_code == 200
    defrag = env.app.state.defrag
    for _ in range(50):
        defrag.tick()
        env.clouds.poll("c1")
        if env.get(f"/v1/defrag/plans/{plan['id']}").json()["state"] == "done":
            break
    final = env.get(f"/v1/defrag/plans/{plan['id']}").json()
    assert final["state"] == "done", final
    steps = final["steps"]
    assert {s["state"] for s in steps} == {"done"}
    claims = env.claims("c1")
    for s in steps:  # each step ended where it was planned, in Berth and in the cloud
        assert claims[s["instance_id"]] == s["target"] == servers(cloud)[s["instance_id"]]
    assert claims == servers(cloud)


def test_a_failed_live_migration_aborts_and_replans_the_step(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=4))
    for _i in range(4):
        env.place("c1", 1, different_host=list(env.claims("c1")))
    env.clouds.poll("c1")
    r = env.post(
        "/v1/defrag/plans",
        {"cluster": "c1", "target": {"objective": "empty-hosts"}, "budget": {"max_migrations": 1}},
    )
    plan = r.json()
    step = plan["steps"][0]
    cloud.set_host_enabled(step["target"], False)  # the cloud will refuse the migration
    env.post(f"/v1/defrag/plans/{plan['id']}/execute", {})
    defrag = env.app.state.defrag
    defrag.tick()  # the step starts: its target claimed in Berth
    env.clouds.poll("c1")  # the migration is asked for, refused: aborted and re-planned
    row = env.get(f"/v1/defrag/plans/{plan['id']}").json()["steps"][0]
    assert row["state"] == "replanned"
    assert "refused" in row["reason"]
    assert env.claims("c1") == servers(cloud)  # the target claim was released


# ---------------------------------------------------------------------------- restarts
def _placed_not_booted(env: CloudEnv, count: int = 2) -> list[tuple[str, str]]:
    """A placement committed in Berth whose boot intents are written, but no boot made: what a
    replica killed right after writing the intents leaves behind."""
    from berth.service.clouds.booting import BootTarget
    from berth.service.clouds.claiming import Claim

    replica = env.app.state.replica
    placed = place(replica, PlaceArgs("p4", count, "default", cluster="c1"))
    targets = [
        BootTarget(Claim(s.instance_id, "c1", "p4"), s.host, s.alternates)
        for s in placed.decision.selections
    ]
    env.clouds.booter.write_intents("c1", targets)
    return [(s.instance_id, s.host) for s in placed.decision.selections]


def test_restart_between_intent_and_boot_boots_it_and_leaks_nothing(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'berth.db'}"
    env = make_cloud_env(url)
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    placed = _placed_not_booted(env)
    env.close()  # killed: intents and claims written, the cloud never asked
    assert servers(cloud) == {}
    env = make_cloud_env(url)
    try:
        assert env.clouds.registry.get("c1") is cloud  # the same cloud, found again
        done = env.clouds.reconcile("c1")
        assert sorted(done.booted) == sorted(i for i, _ in placed)
        assert servers(cloud) == dict(placed) == env.claims("c1")
        assert {s.state for s in env.store.list_servers("c1")} == {"active"}
    finally:
        env.close()


def test_restart_between_boot_and_record_adopts_the_server(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'berth.db'}"
    env = make_cloud_env(url)
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    placed = _placed_not_booted(env)
    for iid, h in placed:  # the cloud took the boots; the replica died before recording them
        cloud.boot(BootRequest(name=iid, flavor="p4", host=h))
    env.close()
    env = make_cloud_env(url)
    try:
        done = env.clouds.reconcile("c1")
        assert sorted(done.adopted) == sorted(i for i, _ in placed)
        assert done.booted == []
        assert servers(cloud) == dict(placed) == env.claims("c1")  # no second server
        assert len(cloud.servers()) == len(placed)
        by_name = {s.name: s.id for s in cloud.servers()}
        for iid, _ in placed:
            assert env.store.get_server(iid).server_id == by_name[iid]
    finally:
        env.close()


def test_a_claim_released_while_its_intent_waits_boots_nothing(env: CloudEnv):
    cloud = env.join("c1", cloud_fleet("c1", n=3))
    placed = _placed_not_booted(env, 1)
    env.app.state.replica.release(placed[0][0])
    env.clouds.reconcile("c1")
    assert servers(cloud) == {} == env.claims("c1")
    assert env.store.get_server(placed[0][0]).state == "failed"


def test_join_makes_server_groups_deployment_sets_of_their_project(env: CloudEnv):
    fleet = cloud_fleet("c1", n=3)
    members = [
        Instance(id=f"web-{i}", host=f"c1-h-{i}", flavor="p4", project="p1", server_group="g1")
        for i in range(2)
    ]
    stranger = Instance(id="x-0", host="c1-h-2", flavor="p4", project="p2", server_group="g1")
    fleet = fleet.model_copy(
        update={
            "server_groups": [
                ServerGroup(id="g1", policy=GroupPolicy.ANTI_AFFINITY, project="p1"),
                ServerGroup(id="g2", policy=GroupPolicy.SOFT_AFFINITY),
            ],
            "instances": [*members, stranger],
        }
    )
    env.join("c1", fleet)
    sets = {(g["project"], g["id"]): g for g in env.get("/v1/deployment-sets").json()}
    assert sets["p1", "g1"]["policy"] == "anti-affinity"
    assert sets["p1", "g1"]["members"] == 2  # not the other project's server
    assert sets["default", "g2"]["policy"] == "soft-affinity"
    assert env.get("/v1/instances/web-0").json()["deployment_set"] == "g1"
    assert env.get("/v1/instances/x-0").json()["deployment_set"] is None
    # the set holds: one more anti-affinity member goes to the host without one
    r = env.place("c1", 1, deployment_set="g1", project="p1")
    assert r.status_code == 201, r.text
    assert r.json()["instances"][0]["host"] == "c1-h-2"
