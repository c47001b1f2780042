"""The elastic pools' REST API through the real app: roles (admin, group-admin, vm agent),
groups and quotas, the agent's heartbeat and command results, the command log, history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.elastic.model import VmState
from tests.service.elastic_env import ElasticEnv, htcondor_group, make_elastic_env
from tests.store.fleets import NOW

JUNO = {
    "flavor": "p4",
    "cores_per_vm": 4,
    "slots_per_vm": 4,
    "queue": {"system": "htcondor", "accounting_group": "group_juno"},
    "max_vms": 3,
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ElasticEnv]:
    e = make_elastic_env(tmp_path / "berth.db")
    e.store.put_elastic_group(htcondor_group("bes"))
    e.tokens["juno-admin"] = ""
    yield e
    e.store.close()


def _group_admin(env: ElasticEnv, group: str) -> str:
    r = env.post(
        "/v1/tokens", {"name": f"{group}-admin", "role": "group-admin", "elastic_group": group}
    )
    assert r.status_code == 201, r.text
    assert r.json()["elastic_group"] == group
    return str(r.json()["token"])


def test_groups_quotas_and_group_admin_scope(env: ElasticEnv) -> None:
    r = env.put("/v1/elastic/groups/juno", JUNO)
    assert r.status_code == 200, r.text
    assert r.json()["queue"] == {"system": "htcondor", "accounting_group": "group_juno"}
    env.tokens["juno-admin"] = _group_admin(env, "juno")
    assert [g["name"] for g in env.get("/v1/elastic/groups").json()] == ["bes", "juno"]
    assert [g["name"] for g in env.get("/v1/elastic/groups", "juno-admin").json()] == ["juno"]
    assert env.get("/v1/elastic/groups/bes", "juno-admin").status_code == 403
    assert env.put("/v1/elastic/groups/bes", JUNO, "juno-admin").status_code == 403
    assert env.put("/v1/elastic/groups/new", JUNO, "juno-admin").status_code == 403
    r = env.put("/v1/elastic/groups/juno", {**JUNO, "max_vms": 5}, "juno-admin")
    assert r.status_code == 200
    assert r.json()["max_vms"] == 5
    assert env.delete("/v1/elastic/groups/juno", "juno-admin").status_code == 403
    assert env.put("/v1/elastic/limits", {"max_vms": 6}, "juno-admin").status_code == 403
    assert env.get("/v1/hosts", "juno-admin").status_code == 403  # nothing outside its group
    assert env.put("/v1/elastic/groups/x", JUNO, "reader").status_code == 403
    assert env.get("/v1/elastic/groups", "tenant").status_code == 403
    bad = env.put("/v1/elastic/groups/x", {**JUNO, "min_vms": 9})
    assert bad.status_code == 422
    assert "min_vms" in bad.json()["error"]["message"]
    slurm = {**JUNO, "queue": {"system": "slurm"}}
    assert env.put("/v1/elastic/groups/x", slurm).json()["error"]["field"] == "body.queue"
    r = env.put("/v1/elastic/limits", {"max_vms": 6, "max_cores": None}, "operator")
    assert r.json() == {"max_vms": 6, "max_cores": None}
    assert env.get("/v1/elastic/limits", "reader").json() == {"max_vms": 6, "max_cores": None}
    assert env.delete("/v1/elastic/groups/juno", "operator").status_code == 204


def test_the_agent_touches_only_its_own_vm(env: ElasticEnv) -> None:
    store = env.store
    _, secret = store.record_vm("bes-1", "bes", NOW)
    _, other = store.record_vm("bes-2", "bes", NOW)
    store.move_vm("bes-1", VmState.BOOTING, NOW)
    env.tokens["vm"] = secret
    r = env.post("/v1/elastic/vms/bes-1/heartbeat", {"running_jobs": 0}, "vm")
    assert r.status_code == 200, r.text
    assert r.json() == {"vm": "bes-1", "group": "bes", "state": "booting", "commands": []}
    assert store.get_vm("bes-1").heartbeat == NOW
    assert env.post("/v1/elastic/vms/bes-2/heartbeat", {}, "vm").status_code == 403
    assert env.get("/v1/elastic/vms/bes-1", "vm").status_code == 403
    assert env.get("/v1/elastic/groups", "vm").status_code == 403
    assert env.get("/v1/hosts", "vm").status_code == 403
    assert env.post("/v1/placements", {"flavor": "p4"}, "vm").status_code == 403
    bad = env.post("/v1/elastic/vms/bes-1/heartbeat", {"running_jobs": -1}, "vm")
    assert bad.status_code == 422

    join = env.post("/v1/elastic/vms/bes-1/commands", {"kind": "join"}, "operator")
    assert join.status_code == 201, join.text
    cid = join.json()["id"]
    beat = env.post("/v1/elastic/vms/bes-1/heartbeat", {"running_jobs": 0}, "vm").json()
    assert [(c["id"], c["kind"], c["state"]) for c in beat["commands"]] == [
        (cid, "join", "delivered")
    ]
    assert beat["commands"][0]["args"]["queue"]["accounting_group"] == "group_bes"
    r = env.post(f"/v1/elastic/vms/bes-1/commands/{cid}/result", {"ok": True, "result": "ok"}, "vm")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "done"
    assert env.get("/v1/elastic/vms/bes-1").json()["state"] == "joined"
    again = env.post(f"/v1/elastic/vms/bes-1/commands/{cid}/result", {"ok": False}, "vm")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "command_state"
    other_cmd = env.post(f"/v1/elastic/vms/bes-2/commands/{cid}/result", {"ok": True}, "vm")
    assert other_cmd.status_code == 403
    assert env.post("/v1/elastic/vms/bes-2/heartbeat", {}, other).status_code == 200
    booting_leave = env.post("/v1/elastic/vms/bes-2/commands", {"kind": "leave"})
    assert booting_leave.status_code == 409
    assert booting_leave.json()["error"]["code"] == "vm_state"

    leave = env.post("/v1/elastic/vms/bes-1/commands", {"kind": "leave"})
    assert leave.status_code == 201
    assert env.get("/v1/elastic/vms/bes-1").json()["state"] == "draining"
    store.move_vm("bes-1", VmState.RETIRED, NOW + 5)
    gone = env.post("/v1/elastic/vms/bes-1/heartbeat", {"running_jobs": 0}, "vm")
    assert gone.status_code == 401  # its token was revoked with the move
    finished = env.post("/v1/elastic/vms/bes-1/heartbeat", {"running_jobs": 0}, "operator")
    assert finished.status_code == 409
    assert finished.json()["error"]["code"] == "vm_state"
    history = env.get("/v1/elastic/vms/bes-1/history").json()
    assert [c["state"] for c in history] == [
        "requested",
        "booting",
        "joined",
        "draining",
        "retired",
    ]
    log = env.get("/v1/elastic/commands", params={"vm": "bes-1"}).json()
    assert [(c["kind"], c["state"]) for c in log] == [("join", "done"), ("leave", "failed")]
    assert [v["name"] for v in env.get("/v1/elastic/vms", params={"live": True}).json()] == [
        "bes-2"
    ]


def test_group_admin_sees_only_its_vms_and_commands(env: ElasticEnv) -> None:
    env.put("/v1/elastic/groups/juno", JUNO)
    env.tokens["juno-admin"] = _group_admin(env, "juno")
    env.store.record_vm("bes-1", "bes", NOW)
    env.store.record_vm("juno-1", "juno", NOW)
    env.store.move_vm("juno-1", VmState.BOOTING, NOW)
    mine = env.get("/v1/elastic/vms", "juno-admin").json()
    assert [v["name"] for v in mine] == ["juno-1"]
    assert env.get("/v1/elastic/vms", "juno-admin", params={"group": "bes"}).status_code == 403
    assert env.get("/v1/elastic/vms/bes-1", "juno-admin").status_code == 403
    assert (
        env.post("/v1/elastic/vms/bes-1/commands", {"kind": "shutdown"}, "juno-admin").status_code
        == 403
    )
    r = env.post(
        "/v1/elastic/vms/juno-1/commands", {"kind": "reconfigure", "args": {"k": "v"}}, "juno-admin"
    )
    assert r.status_code == 201
    assert r.json()["issued_by"] == "juno-admin"
    assert [c["vm"] for c in env.get("/v1/elastic/commands", "juno-admin").json()] == ["juno-1"]
    assert env.get("/v1/elastic/commands", "juno-admin", params={"vm": "bes-1"}).status_code == 403
    assert env.get("/v1/elastic/hooks", "juno-admin").status_code == 422
    assert env.get("/v1/elastic/hooks", "juno-admin", params={"vm": "juno-1"}).json() == []
    assert env.get("/v1/elastic/power", "juno-admin").status_code == 403
    assert env.get("/v1/elastic/power", "reader").json() == []
    assert env.get("/v1/elastic/decision").status_code == 404  # no loop in this app
    metrics = env.client.get("/metrics").text
    assert 'berth_elastic_vms{group="juno",state="booting"} 1.0' in metrics
    assert 'berth_elastic_vms{group="bes",state="requested"} 1.0' in metrics
    assert "berth_hosts_powered_off 0.0" in metrics


def test_accounting_from_the_state_history(env: ElasticEnv) -> None:
    env.put("/v1/elastic/groups/juno", JUNO)
    env.tokens["juno-admin"] = _group_admin(env, "juno")
    store = env.store
    for name, group in (("bes-1", "bes"), ("juno-1", "juno")):
        store.record_vm(name, group, NOW)
        store.move_vm(name, VmState.BOOTING, NOW + 0)
        store.move_vm(name, VmState.FAILED, NOW + 1800)  # half an hour in the cloud
    rows = env.get("/v1/elastic/accounting", params={"until": NOW + 7200}).json()
    assert [(r["group"], r["vm_hours"], r["cpu_hours"], r["points"]) for r in rows] == [
        ("bes", 0.5, 2.0, 2.0),
        ("juno", 0.5, 2.0, 2.0),
    ]
    assert rows[0]["memory_gb_hours"] == 4.0  # p4: 8 GB
    mine = env.get(
        "/v1/elastic/accounting", "juno-admin", params={"per_vm_hour": 10, "until": NOW + 7200}
    ).json()
    assert [(r["group"], r["points"]) for r in mine] == [("juno", 7.0)]
    csv = env.get("/v1/elastic/accounting", params={"format": "csv", "until": NOW + 7200})
    assert csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.splitlines()
    assert lines[0] == "day,group,user,vms,vm_hours,cpu_hours,memory_gb_hours,points"
    assert len(lines) == 3
    assert lines[1].split(",")[1:5] == ["bes", "bes", "1", "0.5"]
