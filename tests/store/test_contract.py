"""The store contract: every test runs on SQLite and on PostgreSQL (see conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from berth.core.model import Flavor
from berth.core.table import HostTable
from berth.service.demo import load_fleet_into
from berth.store.audit import audit
from berth.store.db import current_revision, upgrade
from berth.store.errors import (
    AlreadyExistsError,
    GenerationConflictError,
    IdempotencyRaceError,
    InUseError,
    InvalidReferenceError,
    NotFoundError,
    PlanRejectedError,
)
from berth.store.footprint import to_named
from berth.store.repo import (
    GroupRow,
    HostCapacity,
    Idempotent,
    NewInstance,
    Outcome,
    PoolRow,
    Store,
    day_of,
)
from berth.store.schema import metadata
from tests.store.fleets import NOW, claim_one, host, small_fleet


def loaded(store: Store, n: int = 4) -> None:
    load_fleet_into(store, small_fleet(n), {"c1": "r1"}, now=NOW)


def test_migrations_match_the_schema_and_are_idempotent(store):
    upgrade(store.engine)
    assert current_revision(store.engine) == "0010"
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_topology_rows_and_errors(store):
    loaded(store)
    assert [r["name"] for r in store.list_regions()] == ["r1"]
    assert [(c.name, c.region, c.state) for c in store.list_clusters()] == [("c1", "r1", "active")]
    with pytest.raises(AlreadyExistsError):
        store.add_region("r1")
    with pytest.raises(InvalidReferenceError) as exc:
        store.add_cluster("c2", "nowhere")
    assert exc.value.field == "region"
    with pytest.raises(AlreadyExistsError):
        store.add_hosts("c1", [(host("h-c1-0"), None)])
    with pytest.raises(InvalidReferenceError):
        store.add_hosts("c1", [(host("h-c1-9"), "no-such-pool")])
    store.add_pool(PoolRow("c1", "gpu", "CUSTOM_POOL_GPU"))
    with pytest.raises(AlreadyExistsError):
        store.add_pool(PoolRow("c1", "gpu", "CUSTOM_POOL_GPU"))
    store.add_hosts("c1", [(host("h-c1-9", gpus=2), "gpu")])
    rec = store.get_host("h-c1-9")
    assert rec.pool == "gpu"
    assert rec.generation == 0
    assert rec.host.numa_cells[1].pci == {"gpu-a100": 2}
    store.set_cluster_state("c1", "left")
    assert store.list_clusters()[0].state == "left"
    with pytest.raises(NotFoundError):
        store.set_cluster_state("c9", "left")


def test_claim_bumps_generation_and_logs_events(store):
    loaded(store)
    before = store.latest_event_id()
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    claim_one(store, small_fleet(), "vm-2", "h-c1-0")
    assert store.get_host("h-c1-0").generation == 2
    events = store.events_after(before)
    assert [(e.kind, e.host, e.generation) for e in events] == [
        ("instance_claimed", "h-c1-0", 1),
        ("instance_claimed", "h-c1-0", 2),
    ]
    assert events[0].id < events[1].id
    inst = store.get_instance("vm-1")
    assert inst.host == "h-c1-0"
    assert inst.placement["host"]["memory_mb"] == 8192
    assert audit(store) == []


def test_stale_generation_writes_nothing(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    counts, last = store.counts(), store.latest_event_id()
    with pytest.raises(GenerationConflictError):
        claim_one(store, small_fleet(), "vm-2", "h-c1-0", generation=0)
    assert store.counts() == counts
    assert store.latest_event_id() == last
    assert store.get_host("h-c1-0").generation == 1


def test_commit_reverifies_the_plan_against_current_rows(store):
    """Right generation, but the footprints no longer fit the rows: rejected, nothing written."""
    loaded(store)
    fleet = small_fleet()
    # cell 0 of h-c1-0 has 8 pinned CPUs; two p4 fit, a third computed for an empty host
    # (cell 0 again) does not, even though the generation we pass is current.
    claim_one(store, fleet, "vm-1", "h-c1-0")
    claim_one(store, fleet, "vm-2", "h-c1-0")
    counts = store.counts()
    with pytest.raises(PlanRejectedError, match="over-committed"):
        claim_one(store, fleet, "vm-3", "h-c1-0")
    assert store.counts() == counts
    assert store.get_host("h-c1-0").generation == 2


def test_deployment_set_rules_are_reverified(store):
    loaded(store)
    fleet = small_fleet()
    claim_one(store, fleet, "web-1", "h-c1-0", group="web", group_generation=0)
    with pytest.raises(GenerationConflictError):  # the set moved on
        claim_one(store, fleet, "web-2", "h-c1-1", group="web", group_generation=0)
    with pytest.raises(PlanRejectedError, match="members on host"):
        claim_one(store, fleet, "web-2", "h-c1-0", group="web", group_generation=1)
    claim_one(store, fleet, "web-2", "h-c1-1", group="web", group_generation=1)
    store.add_group(GroupRow("small", "default", "anti-affinity", 1, 1, 0))
    claim_one(store, fleet, "s-1", "h-c1-2", group="small", group_generation=0)
    with pytest.raises(PlanRejectedError, match="exceed"):
        claim_one(store, fleet, "s-2", "h-c1-3", group="small", group_generation=1)
    assert audit(store) == []
    with pytest.raises(InUseError):
        store.delete_group("default", "web")


def _two_host_claim(
    store: Store,
    gens: dict[str, int],
    network: str | None = None,
    outcome: Outcome | None = None,
) -> None:
    """Two p4 instances of deployment set `web`, one on h-c1-0 and one on h-c1-1."""
    table = HostTable.from_fleet(small_fleet())
    types = table.device_types
    new, caps = [], {}
    for k, name in enumerate(("h-c1-0", "h-c1-1")):
        row = table.index[name]
        cell_use, host_use = table.plan_for("p4", row)
        fp = to_named(cell_use, host_use, types)
        new.append(NewInstance(f"w-{k}", name, "c1", "p4", fp, "default", "web", network=network))
        caps[name] = HostCapacity(table.cell_cap[row], table.host_cap[row], types)
    store.commit_placement(
        placement_id="p-two",
        instances=new,
        host_generations=gens,
        group_generations={"default/web": 0},
        capacities=caps,
        outcome=outcome or Outcome("success", "placed", "p4", "default", 2, 1.0),
    )


@pytest.mark.parametrize(
    ("gens", "network", "error"),
    [
        ({"h-c1-0": 0, "h-c1-1": 1}, None, GenerationConflictError),  # second host stale
        ({"h-c1-0": 1, "h-c1-1": 0}, None, GenerationConflictError),  # first host stale
        ({"h-c1-0": 0, "h-c1-1": 0}, "tiny", PlanRejectedError),  # one free IP, two wanted
        ({"h-c1-0": 0}, None, PlanRejectedError),  # an instance on a host not read
    ],
)
def test_multi_host_claim_is_all_or_nothing(store, gens, network, error):
    loaded(store)
    store.add_ip_pool("tiny", "c1", "10.0.0.0/30", 1)
    counts, last = store.counts(), store.latest_event_id()
    with pytest.raises(error):
        _two_host_claim(store, gens, network)
    assert store.counts() == counts
    assert store.latest_event_id() == last
    assert [store.get_host(h).generation for h in ("h-c1-0", "h-c1-1")] == [0, 0]
    assert {g.id: g.generation for g in store.list_groups()}["web"] == 0
    assert store.list_ip_pools()[0]["used"] == 0


def test_multi_host_claim_writes_rows_events_and_generations(store):
    loaded(store)
    store.add_ip_pool("wide", "c1", "10.0.0.0/24", 10)
    before = store.latest_event_id()
    _two_host_claim(store, {"h-c1-0": 0, "h-c1-1": 0}, "wide")
    events = store.events_after(before)
    assert [(e.kind, e.host, e.generation) for e in events] == [
        ("instance_claimed", "h-c1-0", 1),
        ("instance_claimed", "h-c1-1", 1),
    ]
    assert events[0].id < events[1].id
    assert [e.payload["group_generation"] for e in events] == [1, 1]
    assert [e.payload["instance_id"] for e in events] == ["w-0", "w-1"]
    assert {g.id: g.generation for g in store.list_groups()}["web"] == 1
    assert store.list_ip_pools()[0]["used"] == 2
    assert {i.id: i.placement_id for i in store.list_instances()} == {
        "w-0": "p-two",
        "w-1": "p-two",
    }
    assert store.stats()[-1]["successes"] == 1
    assert audit(store) == []


def test_idempotency_key_is_claimed_once(store):
    loaded(store)
    idem = Idempotent("token:x", "key-1", "h", 201, {"id": "p-1"})
    fleet = small_fleet()
    claim_one(store, fleet, "vm-1", "h-c1-0")
    table = HostTable.from_fleet(fleet)
    row = table.index["h-c1-1"]
    cell_use, host_use = table.plan_for("p4", row)
    types = table.device_types
    cap = {"h-c1-1": HostCapacity(table.cell_cap[row], table.host_cap[row], types)}

    def commit(iid: str, gen: int) -> None:
        store.commit_placement(
            placement_id=f"p-{iid}",
            instances=[
                NewInstance(
                    iid, "h-c1-1", "c1", "p4", to_named(cell_use, host_use, types), "default"
                )
            ],
            host_generations={"h-c1-1": gen},
            group_generations={},
            capacities=cap,
            idempotent=idem,
        )

    commit("vm-2", 0)
    assert store.get_idempotent("token:x", "key-1") == idem
    with pytest.raises(IdempotencyRaceError):
        commit("vm-3", 1)
    assert {i.id for i in store.list_instances()} == {"vm-1", "vm-2"}
    assert store.get_host("h-c1-1").generation == 1


def test_failed_transaction_leaves_no_partial_claim(store):
    """A duplicate instance id fails the insert after the generation update: all rolled back."""
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    last = store.latest_event_id()
    with pytest.raises(PlanRejectedError):
        claim_one(store, small_fleet(), "vm-1", "h-c1-1")
    assert store.get_host("h-c1-1").generation == 0
    assert store.latest_event_id() == last


# Where the claim's process dies (a function it calls, replaced by SIGKILL): after the generation
# updates and the read (both commit paths), and while writing the rows (the general path appends
# its events; the two-round-trip PostgreSQL path wraps each JSON value while binding the inserts).
KILL_POINTS = {
    "sqlite": ["berth.store.claims._check_plan", "berth.store.repo.Store._append"],
    "postgresql": ["berth.store.claims._check_plan", "berth.store.pgclaim.Jsonb"],
}


@pytest.mark.parametrize("point", [0, 1])
def test_killed_process_mid_claim_leaves_no_partial_claim(store, db_url, point):
    """SIGKILL between the generation update and the commit: nothing of the claim remains."""
    loaded(store)
    module, _, name = KILL_POINTS["sqlite" if store.sqlite else "postgresql"][point].rpartition(".")
    script = textwrap.dedent(
        f"""
        import importlib, os, signal
        from berth.store.repo import Store
        from tests.store.fleets import claim_one, small_fleet
        store = Store.open({db_url!r}, migrate=False)
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            owner = importlib.import_module({module!r})
        except ImportError:  # a class attribute: module.Class
            mod, _, cls = {module!r}.rpartition(".")
            owner = getattr(importlib.import_module(mod), cls)
        setattr(owner, {name!r}, die)
        claim_one(store, small_fleet(), "vm-doomed", "h-c1-2")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=os.getcwd(), capture_output=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert store.get_host("h-c1-2").generation == 0
    with pytest.raises(NotFoundError):
        store.get_instance("vm-doomed")
    claim_one(store, small_fleet(), "vm-after", "h-c1-2")  # the host is not left locked


def test_a_connection_lost_mid_claim_writes_nothing_and_is_not_reused(store, db_url):
    """PostgreSQL: the server ends the claim's connection; the commit fails as SQLAlchemy's
    OperationalError (the service answers 503), and the next claim gets a fresh connection."""
    if store.sqlite:
        pytest.skip("a server-side disconnect needs a server")
    loaded(store)
    fleet = small_fleet()
    table = HostTable.from_fleet(fleet)
    row = table.index["h-c1-0"]
    cell_use, host_use = table.plan_for("p4", row)
    types = table.device_types
    args = {
        "placement_id": "p-x",
        "instances": [
            NewInstance("vm-x", "h-c1-0", "c1", "p4", to_named(cell_use, host_use, types), "d")
        ],
        "host_generations": {"h-c1-0": 0},
        "group_generations": {},
        "capacities": {"h-c1-0": HostCapacity(table.cell_cap[row], table.host_cap[row], types)},
    }
    counts = store.counts()
    admin = Store.open(db_url, migrate=False)
    with admin.engine.connect() as conn:  # end every other session on this database
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    admin.close()
    with pytest.raises(OperationalError):
        store.commit_placement(**args)
    assert store.counts() == counts
    store.commit_placement(**args)
    assert store.get_instance("vm-x").host == "h-c1-0"
    assert store.get_host("h-c1-0").generation == 1


def test_release_frees_and_respects_projects(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0", project="alpha")
    with pytest.raises(NotFoundError):
        store.release("vm-1", project="beta")
    inst, ev = store.release("vm-1", project="alpha")
    assert inst.id == "vm-1"
    assert ev.kind == "instance_released"
    assert ev.generation == 2
    with pytest.raises(NotFoundError):
        store.release("vm-1")


def test_evictions_are_recorded(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0", project="alpha")
    store.release("vm-1", reason="preempted")
    [ev] = store.list_evictions()
    assert ev["instance_id"] == "vm-1"
    assert ev["reason"] == "preempted"
    assert store.list_evictions(project="beta") == []


def test_reports_never_go_back_in_time_and_reconcile_once(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    assert store.report("h-c1-0", NOW + 10, {"instances": ["vm-x"], "used": None})
    assert not store.report("h-c1-0", NOW + 5, {"instances": [], "used": None})
    rec = store.get_host("h-c1-0")
    assert rec.host.last_heartbeat == NOW + 10
    assert rec.report == {
        "instances": ["vm-x"],
        "used": None,
    }
    [ev] = store.reconcile()
    assert ev.kind == "discrepancy"
    assert ev.host == "h-c1-0"
    assert ev.payload["missing_on_host"] == ["vm-1"]
    assert ev.payload["unknown_to_berth"] == ["vm-x"]
    assert store.reconcile() == []  # the same report is reconciled once
    assert store.heartbeats_since(NOW + 9) == [("h-c1-0", NOW + 10)]
    with pytest.raises(NotFoundError):
        store.report("nope", NOW, None)


@pytest.mark.parametrize(
    ("previous", "timestamp", "alive_event"),
    [
        (NOW, NOW + 30, False),  # fresh: a plain heartbeat
        (NOW, NOW + 60, False),  # exactly the service-down time: was not down yet
        (NOW, NOW + 61, True),  # was down: the host comes back
        (NOW + 100, NOW + 200, True),
        (NOW + 100, NOW + 50, False),  # older than recorded: nothing changes
    ],
)
def test_a_heartbeat_that_revives_a_host_is_an_event(store, previous, timestamp, alive_event):
    loaded(store)
    store.report("h-c1-0", previous, None)
    before, generation = store.latest_event_id(), store.get_host("h-c1-0").generation
    store.report("h-c1-0", timestamp, None, down_after=60.0)
    events = store.events_after(before)
    if alive_event:
        assert [(e.kind, e.host, e.generation) for e in events] == [("host_alive", "h-c1-0", None)]
        assert events[0].payload == {"heartbeat": timestamp, "previous": previous}
    else:
        assert events == []
    assert store.get_host("h-c1-0").generation == generation  # heartbeats bump no generation
    assert store.get_host("h-c1-0").host.last_heartbeat == max(previous, timestamp)


def test_a_stored_far_future_heartbeat_gives_way_to_real_ones(store):
    """One written before reports were checked (year 2500): a report within the skew replaces
    it (and revives the host), and the simulated agents' bulk heartbeat heals it too."""
    loaded(store)
    poisoned = 16725225600.0
    for name in ("h-c1-0", "h-c1-1"):
        store.report(name, poisoned, {"instances": [], "used": None})
    assert not store.report("h-c1-0", NOW, None)  # without a limit, the poisoned one wins
    before = store.latest_event_id()
    assert store.report(
        "h-c1-0", NOW, {"instances": [], "used": None}, down_after=60.0, not_after=NOW + 300
    )
    rec = store.get_host("h-c1-0")
    assert (rec.host.last_heartbeat, rec.report_ts) == (NOW, NOW)
    assert [e.kind for e in store.events_after(before)] == ["host_alive"]
    store.report("h-c1-2", NOW - 5, None)
    assert store.touch_heartbeats(NOW + 10, 60.0, max_skew=300.0) >= 2
    assert store.get_host("h-c1-1").host.last_heartbeat == NOW + 10
    assert store.get_host("h-c1-2").host.last_heartbeat == NOW + 10


def test_host_state_changes_bump_generation(store):
    loaded(store)
    ev = store.set_host_enabled("h-c1-1", False)
    assert ev.kind == "host_state"
    assert ev.generation == 1
    assert ev.payload == {"enabled": False}
    assert not store.get_host("h-c1-1").host.enabled


def test_catalogue(store):
    loaded(store)
    assert [f.name for f in store.list_flavors()] == ["g1", "p4", "p8", "s2"]
    with pytest.raises(AlreadyExistsError):
        store.add_flavor(Flavor(name="p4", vcpus=1, memory_mb=1))
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    with pytest.raises(InUseError):
        store.delete_flavor("p4")
    store.delete_flavor("p8")
    with pytest.raises(NotFoundError):
        store.delete_flavor("p8")
    store.add_image(
        {
            "name": "centos",
            "architecture": "x86_64",
            "hypervisor_type": None,
            "required_traits": [],
            "clusters": ["c1"],
        }
    )
    assert store.get_image("centos")["clusters"] == ["c1"]
    store.add_ip_pool("net-1", "c1", "10.0.0.0/24", 250)
    assert store.list_ip_pools()[0]["total"] == 250
    with pytest.raises(AlreadyExistsError):
        store.add_ip_pool("net-1", "c1", "10.0.0.0/24", 250)


def test_tokens_are_stored_hashed(store):
    row, secret = store.create_token("ci", "tenant", "alpha")
    assert secret.startswith("berth_")
    found = store.lookup_token(secret)
    assert found is not None
    assert found.role == "tenant"
    assert found.project == "alpha"
    with store.engine.connect() as conn:
        stored = [r[0] for r in conn.exec_driver_sql("SELECT hash FROM tokens")]
    assert secret not in stored
    assert len(stored[0]) == 64
    store.revoke_token(row.id)
    assert store.lookup_token(secret) is None
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "tenant")
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "root")


WHY = {
    "top": 2,
    "weighers": ["ram", "vcpu"],
    "instances": [
        {
            "id": "w-0",
            "draw": "best",
            "margin": 0.10526315789473695,
            "decided_by": "vcpu",
            "ranked": [{"host": "h-c1-0", "score": 1.8157894736842106, "part": [-0.0, 1e-17]}],
        }
    ],
}


def test_outcome_why_is_stored_with_the_claim_or_left_null(store):
    """A claim's outcome keeps its compact why (docs/why.md) exactly, floats and all; an
    outcome without one keeps NULL."""
    loaded(store)
    _two_host_claim(
        store,
        {"h-c1-0": 0, "h-c1-1": 0},
        outcome=Outcome("success", "placed", "p4", "default", 2, 1.0, "on-demand", "c1", WHY),
    )
    store.record_outcome(Outcome("failure", "no_valid_host", "p4", "default", 1, 1.0))
    store.record_outcome(Outcome("success", "placed", "p4", "default", 1, 1.0, why=WHY))
    rows = store.outcomes_after(0)
    assert [r.why for r in rows] == [WHY, None, WHY]
    assert [r.detail for r in rows] == ["c1", None, None]
    assert [r.why for r in store.recent_outcomes(2)] == [None, WHY]


def test_stats_by_day_and_reason(store):
    for outcome, reason in [("success", "placed")] * 3 + [("failure", "no_valid_host")]:
        store.record_outcome(Outcome(outcome, reason, "p4", "default", 1, 1.0))
    [day] = store.stats(7)
    assert day["requests"] == 4
    assert day["successes"] == 3
    assert day["success_rate"] == 0.75
    assert day["failures"] == {"no_valid_host": 1}


def test_snapshot_is_complete(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0", group="web", group_generation=0)
    snap = store.snapshot()
    assert snap.last_event_id == store.latest_event_id()
    assert {h.host.name for h in snap.hosts} == {f"h-c1-{i}" for i in range(4)}
    assert [i.id for i in snap.instances] == ["vm-1"]
    assert snap.groups["default/web"].generation == 1
    assert [a.name for a in snap.pci_aliases] == ["a100"]


def test_preemptible_limit_is_counted_in_the_commit(store):
    loaded(store)
    fleet = small_fleet()
    table = HostTable.from_fleet(fleet)

    def commit(iid: str, host: str) -> None:
        row = table.index[host]
        cell_use, host_use = table.plan_for("s2", row)
        store.commit_placement(
            placement_id=f"p-{iid}",
            instances=[
                NewInstance(
                    iid,
                    host,
                    "c1",
                    "s2",
                    to_named(cell_use, host_use, table.device_types),
                    "default",
                    preemptible=True,
                    business_type="preemptible",
                )
            ],
            host_generations={host: store.get_host(host).generation},
            group_generations={},
            capacities={
                host: HostCapacity(table.cell_cap[row], table.host_cap[row], table.device_types)
            },
            preemptible_limit=("r1", 2),
        )

    commit("pre-1", "h-c1-0")
    commit("pre-2", "h-c1-1")
    with pytest.raises(PlanRejectedError, match="limit is 2"):
        commit("pre-3", "h-c1-2")  # another host, current generation: only the count stops it
    assert len(store.list_instances()) == 2
    assert store.get_host("h-c1-2").generation == 0


def test_remove_host(store):
    loaded(store)
    claim_one(store, small_fleet(), "vm-1", "h-c1-0")
    with pytest.raises(InUseError):
        store.remove_host("h-c1-0")
    store.remove_host("h-c1-3")
    with pytest.raises(NotFoundError):
        store.get_host("h-c1-3")
    with pytest.raises(NotFoundError):
        store.remove_host("h-c1-3")
    assert store.events_after(0, kind="host_removed")[0].host == "h-c1-3"


@given(st.lists(st.floats(min_value=0, max_value=4e9, allow_nan=False), min_size=1, max_size=30))
def test_day_of_is_the_utc_date_whatever_the_order_of_calls(stamps):
    """`day_of` remembers the last day it formatted; any sequence of calls gives the date."""
    for ts in stamps:
        assert day_of(ts) == datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")
