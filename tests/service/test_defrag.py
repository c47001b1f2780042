"""Defrag plans through the real app (httpx via TestClient), on SQLite and PostgreSQL.

The fleet: four hosts of two NUMA cells (8 pinned CPUs each) with one 4-CPU pinned instance in
every cell, so no 8-CPU single-cell flavor (`p8`) fits anywhere although half the pinned CPUs
are free. Moving the two instances of one host onto another frees a whole host: two `p8` fit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import event, given, settings
from hypothesis import strategies as st

from berth.core.model import CellPlacement, Instance
from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.defrag import DefragService
from berth.service.demo import load_fleet_into
from berth.service.replica import Replica
from berth.store.audit import audit
from berth.store.defrag import is_migration
from berth.store.repo import Store
from tests.service import servers
from tests.service.test_sync import same_tables
from tests.store.fleets import NOW, small_fleet

HOSTS = [f"h-c1-{i}" for i in range(4)]


def fragmented_fleet() -> Any:
    fleet = small_fleet(4)
    instances = [
        Instance(
            id=f"i-{h}-{c}",
            host=h,
            flavor="p4",
            numa=[CellPlacement(cell=c, vcpus=4, memory_mb=8192)],
        )
        for h in HOSTS
        for c in (0, 1)
    ]
    return fleet.model_copy(update={"instances": instances})


@dataclass
class Svc:
    app: FastAPI
    client: TestClient
    store: Store
    replica: Replica
    defrag: DefragService
    tokens: dict[str, str]

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, path: str, who: str = "operator", **kw: Any) -> Any:
        return self.client.get(path, headers=self.h(who), **kw)

    def post(self, path: str, body: object = None, who: str = "operator") -> Any:
        return self.client.post(path, json=body, headers=self.h(who))

    def close(self) -> None:
        self.client.close()
        self.store.close()


def start(url: str, tokens: dict[str, str], replica_id: str = "r1") -> Svc:
    store = Store.open(url, replica=replica_id)
    config = ServiceConfig(db_url=url, replica_id=replica_id, token_cache_ttl=0)
    app = create_app(config, store=store, clock=lambda: NOW, background=False)
    return Svc(app, TestClient(app), store, app.state.replica, app.state.defrag, tokens)


@pytest.fixture
def url(db_url: str) -> str:
    seed = Store.open(db_url, replica="loader")
    load_fleet_into(seed, fragmented_fleet(), {"c1": "r1"}, now=NOW)
    seed.close()
    return db_url


@pytest.fixture
def tokens(url: str) -> dict[str, str]:
    store = Store.open(url, replica="tokens")
    out = {
        "admin": store.create_token("admin", "admin")[1],
        "operator": store.create_token("op", "operator")[1],
        "reader": store.create_token("ro", "reader")[1],
        "tenant": store.create_token("t", "tenant", "project-1")[1],
    }
    store.close()
    return out


@pytest.fixture
def svc(url: str, tokens: dict[str, str]) -> Iterator[Svc]:
    s = start(url, tokens)
    yield s
    s.close()


CONCURRENT = 2
PLAN: dict[str, Any] = {
    "cluster": "c1",
    "target": {"objective": "capacity", "flavors": ["p8"]},
    "budget": {"max_migrations": 4, "max_concurrent": CONCURRENT},
}


def hosts_of(store: Store) -> dict[str, str]:
    return {i.id: i.host for i in store.list_instances()}


def planned_hosts(plan: dict[str, Any], start: dict[str, str]) -> dict[str, str]:
    out = dict(start)
    for s in plan["steps"]:
        out[s["instance_id"]] = s["target"]
    return out


def p8_capacity(s: Svc) -> int:
    r = s.get("/v1/capacity", params={"flavor": "p8", "by": "cluster"})
    assert r.status_code == 200, r.text
    return int(r.json()["counts"]["c1"]["p8"])


def create(s: Svc, body: dict[str, Any] = PLAN) -> dict[str, Any]:
    r = s.post("/v1/defrag/plans", body)
    assert r.status_code == 201, r.text
    plan: dict[str, Any] = r.json()
    return plan


def test_a_plan_executed_through_the_service_ends_in_the_planned_state(svc):
    start_hosts = hosts_of(svc.store)
    assert p8_capacity(svc) == 0
    plan = create(svc)
    assert plan["state"] == "planned"
    assert plan["before"]["capacity"] == {"p8": 0}
    assert plan["after"]["capacity"]["p8"] > 0
    assert 0 < plan["migrations"] <= 4
    assert plan["steps_by_state"] == {"pending": plan["migrations"]}
    r = svc.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "running"
    svc.defrag.run_until_idle()
    done = svc.get(f"/v1/defrag/plans/{plan['id']}").json()
    assert done["state"] == "done"
    assert done["steps_by_state"] == {"done": plan["migrations"]}
    assert hosts_of(svc.store) == planned_hosts(plan, start_hosts)
    assert audit(svc.store) == []
    assert p8_capacity(svc) == plan["after"]["capacity"]["p8"]
    assert done["achieved"]["capacity"] == plan["after"]["capacity"]
    metrics = svc.client.get("/metrics").text
    assert f'berth_defrag_migrations_total{{outcome="done"}} {plan["migrations"]}.0' in metrics


def test_the_adapter_confirms_each_step_and_waves_run_in_order(svc):
    start_hosts = hosts_of(svc.store)
    plan = create(svc)
    pid = plan["id"]
    svc.post(f"/v1/defrag/plans/{pid}/execute")
    seen_waves = []
    for _ in range(20):
        svc.defrag.run_until_idle()
        body = svc.get(f"/v1/defrag/plans/{pid}").json()
        if body["state"] == "done":
            break
        flying = [s for s in body["steps"] if s["state"] == "migrating"]
        assert 0 < len(flying) <= CONCURRENT
        assert len({s["wave"] for s in flying}) == 1
        seen_waves.append(flying[0]["wave"])
        # in flight: held on both hosts, the fleet is consistent
        assert audit(svc.store) == []
        for s in flying:
            held = svc.store.get_instance(s["instance_id"] + "@migrating")
            assert held.host == s["target"]
            assert svc.store.get_instance(s["instance_id"]).host == s["source"]
        shadow = flying[0]["instance_id"] + "@migrating"  # released only through its step
        listed = {i["id"]: i for i in svc.get(f"/v1/instances?host={flying[0]['target']}").json()}
        assert listed[shadow]["migration_of"] == flying[0]["instance_id"]
        moving = svc.get(f"/v1/instances/{flying[0]['instance_id']}").json()
        assert (moving["host"], moving["migration_of"]) == (flying[0]["source"], None)
        r = svc.client.delete(f"/v1/instances/{shadow}", headers=svc.h("operator"))
        assert (r.status_code, r.json()["error"]["code"]) == (409, "migration_allocation")
        r = svc.post("/v1/evictions", {"instance_id": shadow})
        assert (r.status_code, r.json()["error"]["code"]) == (409, "migration_allocation")
        for s in flying:
            r = svc.post(f"/v1/defrag/plans/{pid}/steps/{s['step']}/confirm")
            assert r.status_code == 200, r.text
            assert r.json()["state"] == "done"
    assert body["state"] == "done"
    assert seen_waves == sorted(seen_waves)
    assert hosts_of(svc.store) == planned_hosts(plan, start_hosts)
    assert audit(svc.store) == []


def test_cancel_mid_way_leaves_a_consistent_fleet(svc):
    plan = create(svc)
    pid = plan["id"]
    svc.post(f"/v1/defrag/plans/{pid}/execute")
    svc.defrag.run_until_idle()
    flying = [
        s for s in svc.get(f"/v1/defrag/plans/{pid}").json()["steps"] if s["state"] == "migrating"
    ]
    assert len(flying) == 2
    svc.post(f"/v1/defrag/plans/{pid}/steps/{flying[0]['step']}/confirm")
    r = svc.post(f"/v1/defrag/plans/{pid}/cancel")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "cancelled"
    states = {s["step"]: s["state"] for s in body["steps"]}
    assert states[flying[0]["step"]] == "done"
    assert states[flying[1]["step"]] == "aborted"
    assert set(states.values()) <= {"done", "aborted", "skipped"}
    ids = [i.id for i in svc.store.list_instances()]
    assert not any(is_migration(i) for i in ids)
    assert sorted(ids) == sorted(f"i-{h}-{c}" for h in HOSTS for c in (0, 1))
    assert audit(svc.store) == []
    svc.defrag.run_until_idle()  # a cancelled plan never moves again
    assert svc.get(f"/v1/defrag/plans/{pid}").json()["steps_by_state"] == body["steps_by_state"]
    # the replica's table agrees with a fresh load of the database
    fresh = Replica(svc.store, svc.replica.config, lambda: NOW)
    fresh.reload()
    assert same_tables(svc.replica, fresh)
    r = svc.post(f"/v1/defrag/plans/{pid}/steps/{flying[1]['step']}/confirm")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "step_state")


def test_a_step_whose_target_was_filled_meanwhile_is_replanned_or_skipped(svc):
    plan = create(svc)
    first = plan["steps"][0]
    # fill the first step's target through the placement API (same host as its instances)
    anchor = next(i for i, h in hosts_of(svc.store).items() if h == first["target"])
    filled = 0
    while True:
        r = svc.post(
            "/v1/placements",
            {"flavor": "p4", "project": "fill", "same_host": [anchor]},
        )
        if r.status_code != 201:
            break
        filled += 1
    assert filled == 2  # the two free halves of its cells
    svc.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    svc.defrag.run_until_idle()
    body = svc.get(f"/v1/defrag/plans/{plan['id']}").json()
    step = body["steps"][0]
    assert step["planned_target"] == first["target"]
    assert "no longer fits" in step["reason"]
    assert step["state"] == "done"  # re-planned onto a host with room, not forced
    assert step["target"] != first["target"]
    assert step["replans"] == 1
    assert step["target"] not in {s["source"] for s in plan["steps"]}  # never refills a source
    assert svc.store.get_instance(first["instance_id"]).host == step["target"]
    assert body["state"] == "done"
    assert audit(svc.store) == []
    # re-planned steps use the room left elsewhere; steps that then find none are skipped;
    # what is achieved is a real gain, never more than planned
    assert 0 < body["achieved"]["capacity"]["p8"] <= plan["after"]["capacity"]["p8"]
    assert {x["state"] for x in body["steps"]} <= {"done", "skipped"}
    assert p8_capacity(svc) == body["achieved"]["capacity"]["p8"]
    metrics = svc.client.get("/metrics").text
    assert 'berth_defrag_migrations_total{outcome="replanned"}' in metrics


def test_a_step_with_no_other_target_is_skipped_not_forced(svc):
    plan = create(svc)
    sources = {s["source"] for s in plan["steps"]}
    for host in sorted(set(HOSTS) - sources):  # fill every host the plan does not empty
        anchor = next(i for i, h in hosts_of(svc.store).items() if h == host)
        while (
            svc.post("/v1/placements", {"flavor": "p4", "same_host": [anchor]}).status_code == 201
        ):
            pass
    svc.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    svc.defrag.run_until_idle()
    body = svc.get(f"/v1/defrag/plans/{plan['id']}").json()
    assert body["state"] == "done"
    assert {s["state"] for s in body["steps"]} == {"skipped"}
    assert all("no other host fits" in s["reason"] for s in body["steps"])
    assert not any(is_migration(i.id) for i in svc.store.list_instances())
    assert audit(svc.store) == []


def test_a_plan_survives_a_replica_restart(url, tokens):
    a = start(url, tokens, "r1")
    a.defrag.lease_ttl = 0.2
    start_hosts = hosts_of(a.store)
    plan = create(a)
    a.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    assert a.defrag.tick() > 0  # the first wave started, then the replica dies
    a.close()
    b = start(url, tokens, "r2")
    try:
        body = b.get(f"/v1/defrag/plans/{plan['id']}").json()
        assert body["state"] == "running"
        assert body["owner"] == "r1"
        assert body["steps_by_state"].get("migrating", 0) > 0
        assert audit(b.store) == []
        time.sleep(0.3)  # r1's lease runs out
        b.defrag.run_until_idle()
        body = b.get(f"/v1/defrag/plans/{plan['id']}").json()
        assert body["state"] == "done"
        assert body["steps_by_state"] == {"done": plan["migrations"]}
        assert hosts_of(b.store) == planned_hosts(plan, start_hosts)
        assert audit(b.store) == []
    finally:
        b.close()


def test_a_restarted_replica_resumes_its_plan_at_once(url, tokens):
    a = start(url, tokens, "r1")
    plan = create(a)
    a.post(f"/v1/defrag/plans/{plan['id']}/execute")
    a.defrag.tick()  # first wave in flight, then the process restarts (same --replica-id)
    a.close()
    again = start(url, tokens, "r1")
    try:
        body = again.get(f"/v1/defrag/plans/{plan['id']}").json()
        flying = [x for x in body["steps"] if x["state"] == "migrating"]
        assert flying
        for x in flying:  # the adapter reports the migrations it finished meanwhile
            r = again.post(f"/v1/defrag/plans/{plan['id']}/steps/{x['step']}/confirm")
            assert r.status_code == 200, r.text
        assert again.defrag.tick() > 0  # its own lease: no wait for expiry
        body = again.get(f"/v1/defrag/plans/{plan['id']}").json()
        assert body["steps_by_state"].get("migrating", 0) > 0  # the next wave started
        assert audit(again.store) == []
    finally:
        again.close()


def test_a_replica_does_not_drive_a_plan_another_one_holds(url, tokens):
    a, b = start(url, tokens, "r1"), start(url, tokens, "r2")
    try:
        plan = create(a)
        a.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
        assert a.defrag.tick() > 0
        assert b.defrag.tick() == 0  # a holds the lease
        a.defrag.run_until_idle()
        assert a.get(f"/v1/defrag/plans/{plan['id']}").json()["state"] == "done"
    finally:
        a.close()
        b.close()


def test_a_second_replica_sees_the_migrations_and_keeps_an_exact_table(url, tokens):
    a, b = start(url, tokens, "r1"), start(url, tokens, "r2")
    try:
        plan = create(a)
        a.post(f"/v1/defrag/plans/{plan['id']}/execute")
        a.defrag.tick()  # first wave in flight: migration allocations on the targets
        b.replica.sync()
        assert same_tables(a.replica, b.replica)
        table = b.replica.clusters["c1"].table
        shadows = [x for x in table.allocations.values() if is_migration(x.instance_id)]
        assert len(shadows) == 2
        assert not any(x.migratable for x in shadows)  # the planner never moves them
        for s in plan["steps"][:2]:
            a.post(f"/v1/defrag/plans/{plan['id']}/steps/{s['step']}/confirm")
        b.replica.sync()
        assert same_tables(a.replica, b.replica)
        reloads = b.replica.reloads
        a.defrag.run_until_idle()
        while a.get(f"/v1/defrag/plans/{plan['id']}").json()["state"] != "done":
            body = a.get(f"/v1/defrag/plans/{plan['id']}").json()
            for s in body["steps"]:
                if s["state"] == "migrating":
                    a.post(f"/v1/defrag/plans/{plan['id']}/steps/{s['step']}/confirm")
            a.defrag.run_until_idle()
        b.replica.sync()
        assert same_tables(a.replica, b.replica)
        assert b.replica.reloads == reloads  # applied event by event, no reload needed
        fresh = Replica(b.store, b.replica.config, lambda: NOW)
        fresh.reload()
        assert same_tables(b.replica, fresh)
    finally:
        a.close()
        b.close()


def test_a_draining_host_gets_no_placements_and_a_plan_empties_it(svc):
    r = svc.client.put("/v1/hosts/h-c1-1/drain", headers=svc.h("operator"))
    assert r.status_code == 200, r.text
    assert r.json()["draining"] is True
    assert svc.get("/v1/defrag/draining").json() == ["h-c1-1"]
    by_host = svc.get("/v1/capacity", params={"flavor": "s2", "by": "host"}).json()["counts"]
    assert by_host["h-c1-1"]["s2"] == 0
    assert by_host["h-c1-0"]["s2"] > 0
    # enabling a draining host does not make it take placements, here or on another replica
    other = Replica(
        Store.open(svc.store.engine.url.render_as_string(False), replica="r2"),
        svc.replica.config,
        lambda: NOW,
    )
    other.reload()
    assert svc.post("/v1/hosts/h-c1-1/disable").status_code == 200
    assert svc.post("/v1/hosts/h-c1-1/enable").status_code == 200
    by_host = svc.get("/v1/capacity", params={"flavor": "s2", "by": "host"}).json()["counts"]
    assert by_host["h-c1-1"]["s2"] == 0
    other.sync()
    fresh = Replica(svc.store, svc.replica.config, lambda: NOW)
    fresh.reload()
    assert exact(svc.replica, fresh)
    assert exact(other, fresh)
    other.store.close()
    for _ in range(6):
        r = svc.post("/v1/placements", {"flavor": "s2", "project": "p"})
        assert r.status_code == 201, r.text
        assert r.json()["instances"][0]["host"] != "h-c1-1"
    plan = create(
        svc,
        {
            "cluster": "c1",
            "target": {"objective": "empty-hosts"},
            "budget": {"max_migrations": 4},
        },
    )
    assert plan["target"]["drain"] == ["h-c1-1"]
    assert {s["source"] for s in plan["steps"]} >= {"h-c1-1"}
    assert all(s["target"] != "h-c1-1" for s in plan["steps"])
    assert plan["after"]["drained_left"] == 0
    svc.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    svc.defrag.run_until_idle()
    assert [i.id for i in svc.store.list_instances(host="h-c1-1")] == []
    assert audit(svc.store) == []
    r = svc.client.delete("/v1/hosts/h-c1-1/drain", headers=svc.h("operator"))
    assert r.json()["draining"] is False
    by_host = svc.get("/v1/capacity", params={"flavor": "s2", "by": "host"}).json()["counts"]
    assert by_host["h-c1-1"]["s2"] > 0


ADMIT: dict[str, Any] = {"cluster": "c1", "flavor": "p8"}


def test_an_admission_plans_one_migration_after_which_the_flavor_is_placed(svc):
    start_hosts = hosts_of(svc.store)
    assert svc.post("/v1/placements", {"flavor": "p8"}).status_code != 201  # fits nowhere
    r = svc.post("/v1/defrag/admissions", ADMIT)
    assert r.status_code == 201, r.text
    plan = r.json()
    assert plan["state"] == "planned"
    assert plan["migrations"] == 1
    assert plan["target"]["flavors"] == ["p8"]
    assert plan["budget"]["max_migrations"] == 1
    assert plan["before"]["capacity"] == {"p8": 0}
    assert plan["after"]["capacity"]["p8"] >= 1
    (step,) = plan["steps"]
    assert step["source"] != step["target"]
    r = svc.post(f"/v1/defrag/plans/{plan['id']}/execute", {"auto_confirm": True})
    assert r.status_code == 200, r.text
    svc.defrag.run_until_idle()
    done = svc.get(f"/v1/defrag/plans/{plan['id']}").json()
    assert done["state"] == "done"
    assert hosts_of(svc.store) == planned_hosts(plan, start_hosts)
    assert audit(svc.store) == []
    placed = svc.post("/v1/placements", {"flavor": "p8"})
    assert placed.status_code == 201, placed.text
    assert placed.json()["instances"][0]["host"] == step["source"]


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"flavor": "p4"}, 409, "fits_already", "flavor"),
        ({"flavor": "g1"}, 409, "no_admission", "max_migrations"),  # no host has a GPU
        ({"flavor": "nope"}, 422, "unknown_flavor", "flavor"),
        ({"cluster": "c9"}, 422, "unknown_cluster", "cluster"),
        ({"max_migrations": 5}, 422, "invalid_input", "body.max_migrations"),
        ({"max_migrations": 0}, 422, "invalid_input", "body.max_migrations"),
        ({"extra": 1}, 422, "invalid_input", "body.extra"),
    ],
)
def test_admission_answers_name_the_field(svc, body, status, code, field):
    before = svc.get("/v1/defrag/plans").json()
    r = svc.post("/v1/defrag/admissions", {**ADMIT, **body})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (err["code"], err["field"]) == (code, field)
    assert svc.get("/v1/defrag/plans").json() == before  # nothing stored


def test_admission_roles(svc):
    for who in ("reader", "tenant"):
        r = svc.post("/v1/defrag/admissions", ADMIT, who=who)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert svc.client.post("/v1/defrag/admissions", json=ADMIT).status_code == 401
    assert svc.post("/v1/defrag/admissions", ADMIT, who="admin").status_code == 201


def test_roles(svc):
    plan = create(svc)
    pid = plan["id"]
    assert svc.get("/v1/defrag/plans", who="reader").status_code == 200
    assert svc.get(f"/v1/defrag/plans/{pid}", who="reader").status_code == 200
    for path, body in [
        ("/v1/defrag/plans", PLAN),
        (f"/v1/defrag/plans/{pid}/execute", None),
        (f"/v1/defrag/plans/{pid}/cancel", None),
        (f"/v1/defrag/plans/{pid}/steps/0/confirm", None),
    ]:
        for who in ("reader", "tenant"):
            r = svc.post(path, body, who=who)
            assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), (path, who)
    assert svc.get("/v1/defrag/plans", who="tenant").status_code == 403
    assert svc.get(f"/v1/defrag/plans/{pid}", who="tenant").status_code == 403
    assert svc.client.put("/v1/hosts/h-c1-0/drain", headers=svc.h("tenant")).status_code == 403
    assert svc.client.get("/v1/defrag/plans").status_code == 401
    assert svc.post(f"/v1/defrag/plans/{pid}/execute", who="admin").status_code == 200


@pytest.mark.parametrize(
    ("change", "status", "code", "field"),
    [
        ({"cluster": "c9"}, 422, "unknown_cluster", "cluster"),
        ({"target": {"flavors": ["p8", "nope"]}}, 422, "unknown_flavor", "target.flavors[1]"),
        ({"target": {"drain": ["h-c1-9"]}}, 422, "unknown_host", "target.drain[0]"),
        ({"target": {"flavors": []}}, 422, "invalid_input", "target.flavors"),
        (
            {"target": {"flavors": ["p8"], "weights": [1, 2]}},
            422,
            "invalid_input",
            "target.weights",
        ),
        (
            {"budget": {"max_migrations": 4, "max_concurrent": 0}},
            422,
            "invalid_input",
            "body.budget.max_concurrent",
        ),
        ({"budget": {"max_migrations": -1}}, 422, "invalid_input", "body.budget.max_migrations"),
        (
            {"target": {"flavors": ["p8"], "weights": [1e9]}},
            422,
            "invalid_input",
            "body.target.weights[0]",
        ),
        ({"extra": 1}, 422, "invalid_input", "body.extra"),
    ],
)
def test_bad_input_names_the_field(svc, change, status, code, field):
    r = svc.post("/v1/defrag/plans", {**PLAN, **change})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    if field is not None:
        assert err["field"] == field, err


def test_states_and_unknown_things_answer_4xx(svc):
    plan = create(svc)
    pid = plan["id"]
    assert svc.get("/v1/defrag/plans/dp-nope").status_code == 404
    assert svc.post("/v1/defrag/plans/dp-nope/execute").status_code == 404
    r = svc.post(f"/v1/defrag/plans/{pid}/steps/0/confirm")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "step_state")
    assert svc.post(f"/v1/defrag/plans/{pid}/steps/99/confirm").status_code == 404
    r = svc.post(f"/v1/defrag/plans/{pid}/pause")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "plan_state")
    assert svc.post(f"/v1/defrag/plans/{pid}/execute").status_code == 200
    r = svc.post(f"/v1/defrag/plans/{pid}/execute")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "plan_state")
    other = create(svc)
    r = svc.post(f"/v1/defrag/plans/{other['id']}/execute")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "plan_state")
    assert "already runs" in r.json()["error"]["message"]
    assert svc.post(f"/v1/defrag/plans/{pid}/pause").json()["state"] == "paused"
    assert svc.defrag.run_until_idle() == 0  # paused: nothing starts
    assert svc.post(f"/v1/defrag/plans/{pid}/resume").json()["state"] == "running"
    assert svc.client.put("/v1/hosts/h-nope/drain", headers=svc.h("operator")).status_code == 404
    listed = svc.get("/v1/defrag/plans", params={"state": "running"}).json()
    assert [p["id"] for p in listed] == [pid]
    assert listed[0]["steps"] is None


@pytest.mark.slow
def test_the_cli_drives_a_plan_on_a_real_server(tmp_path):
    db = f"sqlite:///{tmp_path / 'berth.db'}"
    seed = Store.open(db, replica="loader")
    load_fleet_into(seed, fragmented_fleet(), {"c1": "r1"}, now=time.time())
    token = seed.create_token("admin", "admin")[1]
    seed.close()
    # the hosts heartbeat once, at loading: on a loaded machine the test outlives the default
    # 60 s service-down time, which would take every host down and the capacity with it
    server = servers.start(db, "defrag", tmp_path, "--service-down-time", "3600")
    try:
        servers.wait_ready([server])
        common = ["--url", server.url, "--token", token]

        def berth(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [servers.BERTH, "api", "defrag", *args, *common],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        admitted = berth("admit", "--cluster", "c1", "--flavor", "p8", "--json")
        assert admitted.returncode == 0, admitted.stderr
        admission = json.loads(admitted.stdout)
        assert admission["migrations"] == 1
        assert "1 migrations" in berth("show", admission["id"]).stdout
        assert berth("cancel", admission["id"]).returncode == 0
        fits = berth("admit", "--cluster", "c1", "--flavor", "p4")
        assert fits.returncode == 2
        assert "fits_already" in fits.stderr
        made = berth("create", "--cluster", "c1", "--flavor", "p8", "--budget", "4", "--json")
        assert made.returncode == 0, made.stderr
        plan = json.loads(made.stdout)
        shown = berth("show", plan["id"])
        assert shown.returncode == 0, shown.stderr
        assert "capacity p8" in shown.stdout
        assert "pending" in shown.stdout
        assert berth("execute", plan["id"], "--auto-confirm").returncode == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the service's driver thread carries it out
            shown = berth("show", plan["id"], "--json")
            assert shown.returncode == 0, (shown.stderr, server.log.read_text()[-3000:])
            body = json.loads(shown.stdout)
            if body["state"] == "done":
                break
            time.sleep(0.2)
        assert body["state"] == "done", body
        assert body["achieved"]["capacity"] == plan["after"]["capacity"]
        assert plan["id"] in berth("list").stdout
        other = json.loads(
            berth("create", "--cluster", "c1", "--objective", "empty-hosts", "--json").stdout
        )
        cancelled = berth("cancel", other["id"], "--json")
        assert json.loads(cancelled.stdout)["state"] == "cancelled"
        assert "draining" in berth("drain", "h-c1-0").stdout
        assert "not draining" in berth("drain", "h-c1-0", "--undo").stdout
        bad = berth("create", "--cluster", "c1", "--flavor", "nope")
        assert bad.returncode == 2
        assert "unknown_flavor" in bad.stderr
    finally:
        server.stop()


# ---------------------------------------------------------------------------- property
def exact(a: Replica, b: Replica) -> bool:
    """Same tables, and the same drain and not-migratable flags (what the planner reads)."""
    if not same_tables(a, b):
        return False
    ta, tb = a.clusters["c1"].table, b.clusters["c1"].table
    flags = {i: x.migratable for i, x in ta.allocations.items()}
    return bool((ta.enabled == tb.enabled).all()) and flags == {
        i: x.migratable for i, x in tb.allocations.items()
    }


OPS = ("tick", "tick", "confirm", "abort", "place", "release", "drain", "pause", "cancel")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("defrag") / "berth.db"
    seed = Store.open(f"sqlite:///{path}", replica="loader")
    load_fleet_into(seed, fragmented_fleet(), {"c1": "r1"}, now=NOW)
    toks = {"operator": seed.create_token("op", "operator")[1]}
    seed.close()
    return path, toks


@pytest.mark.slow
@given(data=st.data())
@settings(max_examples=25)
def test_any_interleaving_keeps_the_fleet_consistent_and_replicas_exact(template, data):
    """Steps started, confirmed, aborted, cancelled, paused, interleaved with placements,
    releases and drains: after every operation the rows audit clean, the replica's table equals
    a fresh load of the database, and a second replica that only follows events agrees."""
    path, toks = template
    work = Path(tempfile.mkdtemp()) / "berth.db"
    shutil.copy(path, work)
    url = f"sqlite:///{work}"
    s = start(url, toks)
    other = Replica(Store.open(url, replica="r2", migrate=False), s.replica.config, lambda: NOW)
    other.reload()
    try:
        plan = create(s, {**PLAN, "budget": {"max_migrations": 6, "max_concurrent": 3}})
        pid = plan["id"]
        s.post(f"/v1/defrag/plans/{pid}/execute")
        for _ in range(data.draw(st.integers(3, 14), label="length")):
            op = data.draw(st.sampled_from(OPS), label="op")
            steps = s.get(f"/v1/defrag/plans/{pid}").json()["steps"]
            flying = [x["step"] for x in steps if x["state"] == "migrating"]
            if op == "tick":
                s.defrag.tick()
            elif op in ("confirm", "abort") and flying:
                n = data.draw(st.sampled_from(flying), label="step")
                r = s.post(f"/v1/defrag/plans/{pid}/steps/{n}/{op}")
                assert r.status_code == 200, r.text
                event(f"step {op}ed")
            elif op == "place":
                r = s.post("/v1/placements", {"flavor": data.draw(st.sampled_from(["p4", "s2"]))})
                assert r.status_code in (201, 409), r.text
            elif op == "release":
                ids = sorted(i for i in hosts_of(s.store) if not is_migration(i))
                if ids:
                    victim = data.draw(st.sampled_from(ids), label="release")
                    assert s.client.delete(f"/v1/instances/{victim}", headers=s.h("operator"))
            elif op == "drain":
                host = data.draw(st.sampled_from(HOSTS), label="host")
                method = data.draw(st.sampled_from(["PUT", "DELETE"]), label="drain")
                r = s.client.request(method, f"/v1/hosts/{host}/drain", headers=s.h("operator"))
                assert r.status_code == 200, r.text
            elif op == "pause":
                state = s.get(f"/v1/defrag/plans/{pid}").json()["state"]
                if state in ("running", "paused"):
                    action = "pause" if state == "running" else "resume"
                    assert s.post(f"/v1/defrag/plans/{pid}/{action}").status_code == 200
            elif op == "cancel" and data.draw(st.booleans(), label="really cancel"):
                s.post(f"/v1/defrag/plans/{pid}/cancel")
            assert audit(s.store) == []
            other.sync()
            fresh = Replica(s.store, s.replica.config, lambda: NOW)
            fresh.reload()
            assert exact(s.replica, fresh)
            assert exact(other, fresh)
        s.post(f"/v1/defrag/plans/{pid}/cancel")
        assert not any(is_migration(i) for i in hosts_of(s.store))
        assert audit(s.store) == []
    finally:
        other.store.close()
        s.close()
        shutil.rmtree(work.parent, ignore_errors=True)


def test_migrations_stay_in_their_pool(db_url: str) -> None:
    """Half the hosts are in the enterprise pool: the plan keeps the cluster's pool traits, so
    no instance moves between pools (a pool may be reserved for some users)."""
    fleet = fragmented_fleet()
    pooled = [
        h.model_copy(update={"traits": ["CUSTOM_POOL_ENTERPRISE"]}) if h.name in HOSTS[2:] else h
        for h in fleet.hosts
    ]
    seed = Store.open(db_url, replica="loader")
    load_fleet_into(seed, fleet.model_copy(update={"hosts": pooled}), {"c1": "r1"}, now=NOW)
    tokens = {"operator": seed.create_token("op", "operator")[1]}
    seed.close()
    s = start(db_url, tokens)
    try:
        plan = create(s)
        assert plan["target"]["keep_traits"] == ["CUSTOM_POOL_ENTERPRISE", "CUSTOM_POOL_SHARED"]
        assert plan["steps"]
        pool = {h: "enterprise" if h in HOSTS[2:] else "shared" for h in HOSTS}
        assert all(pool[st["source"]] == pool[st["target"]] for st in plan["steps"])
    finally:
        s.close()
