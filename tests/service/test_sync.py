"""Replicas on one database stay in sync through the event log (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from berth.core.model import Flavor
from berth.service.config import ServiceConfig
from berth.service.demo import load_fleet_into
from berth.service.placing.errors import NoPlacementError
from berth.service.placing.plain import PlaceArgs, choose, place
from berth.service.replica import Replica
from berth.service.sync import SyncThread, _event_id
from berth.store.audit import audit
from berth.store.repo import EventRow, GroupRow, Store
from tests.store.fleets import NOW, host, small_fleet


def replicas(url: str, n: int = 2, *, hosts: int = 4, poll: float = 0.05) -> list[Replica]:
    seed = Store.open(url, replica="loader")
    load_fleet_into(seed, small_fleet(hosts), {"c1": "r1"}, now=NOW)
    seed.close()
    out = []
    for i in range(n):
        config = ServiceConfig(db_url=url, replica_id=f"r{i}", poll_interval=poll)
        r = Replica(Store.open(url, replica=f"r{i}", migrate=False), config, lambda: NOW)
        r.reload()
        out.append(r)
    return out


def same_tables(a: Replica, b: Replica) -> bool:
    for name, va in a.clusters.items():
        ta, tb = va.table, b.clusters[name].table
        if ta.names != tb.names:
            return False
        if not (
            np.array_equal(ta.generation, tb.generation)
            and np.array_equal(ta.cell_free, tb.cell_free)
        ):
            return False
        if set(ta.allocations) != set(tb.allocations):
            return False
    return True


def close(rs: list[Replica]) -> None:
    for r in rs:
        r.store.close()


def test_a_change_is_visible_to_the_other_replica_within_one_event(db_url):
    a, b = replicas(db_url)
    try:
        placed = place(a, PlaceArgs(flavor="p4", count=1, project="default"))
        assert not same_tables(a, b)
        assert b.sync() == 1  # exactly the one claim event
        assert same_tables(a, b)
        a.release(placed.decision.selections[0].instance_id)
        assert b.sync() == 1
        assert same_tables(a, b)
        a.set_enabled("h-c1-3", False)
        assert b.sync() == 1
        assert same_tables(a, b)
    finally:
        close([a, b])


def test_a_stale_replica_loses_the_race_then_retries(db_url):
    a, b = replicas(db_url, hosts=1)
    try:
        place(a, PlaceArgs(flavor="p4", count=1, project="default"))
        # b has not seen a's claim: its commit fails on the generation, it catches up, retries
        placed = place(b, PlaceArgs(flavor="p4", count=1, project="default"))
        assert placed.attempts == 2
        a.sync()
        assert same_tables(a, b)
        assert audit(a.store) == []
    finally:
        close([a, b])


def test_stale_replicas_never_break_a_deployment_set(db_url):
    a, b = replicas(db_url, hosts=3)
    try:
        a.store.add_group(GroupRow("db", "default", "anti-affinity", 1, None, 0))
        a.sync()
        b.sync()
        args = PlaceArgs(flavor="s2", count=1, project="default", deployment_set="db")
        for r in (a, b, a):  # neither syncs in between: each decides on a stale view
            place(r, args)
        with pytest.raises(NoPlacementError, match=r"hosts fit"):
            place(b, args)
        members = a.store.list_instances(server_group="db")
        assert len({m.host for m in members}) == len(members) == 3
        assert audit(a.store) == []
    finally:
        close([a, b])


def test_events_with_a_gap_make_the_replica_reload(db_url):
    [a] = replicas(db_url, n=1)
    try:
        gen = int(a.clusters["c1"].table.generation[0])
        bogus = EventRow(10**9, 0.0, "host_state", "h-c1-0", gen + 5, "x", {"enabled": False})
        reloads = a.reloads
        a._apply(bogus)
        assert a.needs_reload
        a.sync()  # nothing new in the log, but the flag is honoured on the next placement
        place(a, PlaceArgs(flavor="p4", count=1, project="default"))
        assert a.reloads == reloads + 1
        assert bool(a.clusters["c1"].table.enabled[0])  # the bogus event left no trace
    finally:
        close([a])


def test_new_hosts_and_flavors_reach_other_replicas(db_url):
    a, b = replicas(db_url)
    try:
        a.store.add_hosts("c1", [(host("h-c1-7"), None)])
        a.store.add_flavor(Flavor(name="tiny", vcpus=1, memory_mb=256))
        b.sync()
        assert "h-c1-7" in b.clusters["c1"].table.index
        assert "tiny" in b.clusters["c1"].table.flavors
        place(b, PlaceArgs(flavor="tiny", count=1, project="default"))
    finally:
        close([a, b])


def test_heartbeats_reach_other_replicas(db_url):
    a, b = replicas(db_url)
    try:
        a.store.report("h-c1-2", NOW + 100, None)
        assert b.refresh_heartbeats() >= 1
        t = b.clusters["c1"].table
        assert t.heartbeat[t.index["h-c1-2"]] == NOW + 100
    finally:
        close([a, b])


def test_a_revived_host_reaches_other_replicas_as_an_event(db_url):
    """A heartbeat after more than the service-down time is an event: the other replica lets
    the host back in at its next sync, without waiting for its heartbeat poll or reloading."""
    a, b = replicas(db_url)
    try:
        late = NOW + 1000  # every host's last heartbeat (NOW) is long stale by then
        a.store.report("h-c1-1", late, None, down_after=a.config.service_down_time)
        reloads = b.reloads
        assert b.sync() == 1
        t = b.clusters["c1"].table
        assert t.heartbeat[t.index["h-c1-1"]] == late
        assert b.reloads == reloads
        a.store.report("h-c1-1", late + 1, None, down_after=a.config.service_down_time)
        assert b.sync() == 0  # an ordinary heartbeat is not an event
    finally:
        close([a, b])


def test_races_lost_to_logged_commits_need_no_reload(db_url):
    """Replica b takes the only host twice between a's decision and a's commit: a loses twice,
    catches up from the events each time and places on the third attempt, without reloading."""
    a, b = replicas(db_url, hosts=1)
    try:
        real, races = a.store.commit_placement, [2]

        def racing(**kwargs):
            if races[0]:
                races[0] -= 1
                place(b, PlaceArgs(flavor="p4", count=1, project="default"))
            return real(**kwargs)

        a.store.commit_placement = racing  # type: ignore[method-assign]
        commits: list[bool] = []
        a.on_commit = lambda _seconds, committed: commits.append(committed)
        reloads = a.reloads
        placed = place(a, PlaceArgs(flavor="p4", count=1, project="default"))
        assert placed.attempts == 3
        assert commits == [False, False, True]
        assert a.reloads == reloads
        b.sync()
        assert same_tables(a, b)
        assert audit(a.store) == []
    finally:
        close([a, b])


def test_background_sync_follows_the_log(db_url):
    """The sync thread wakes on NOTIFY (PostgreSQL) or polls (SQLite)."""
    a, b = replicas(db_url, poll=0.05 if "sqlite" in db_url else 5.0)
    thread = SyncThread(b)
    thread.start()
    try:
        time.sleep(0.3)  # LISTEN is up
        started = time.monotonic()
        place(a, PlaceArgs(flavor="p4", count=2, project="default"))
        while b.last_event < a.store.latest_event_id() and time.monotonic() - started < 3:
            time.sleep(0.01)
        # with a 5 s poll on PostgreSQL only NOTIFY can explain catching up this fast
        assert time.monotonic() - started < 2.5
        with b.lock:
            assert same_tables(a, b)
    finally:
        thread.close()
        close([a, b])


def test_events_committed_out_of_id_order_are_not_skipped(db_url):
    """A replica that sees event n+1 before event n asks for n again until it appears."""
    a, b = replicas(db_url)
    try:
        first = place(a, PlaceArgs(flavor="p4", count=1, project="default"))
        second = place(a, PlaceArgs(flavor="s2", count=1, project="default"))
        e1, e2 = first.commit.events[0], second.commit.events[0]
        with b.lock:  # as if e1's transaction were still committing when b read e2
            b._apply_own(e2)
        assert b.has_gaps()
        assert b.last_event == e2.id
        b.sync()
        assert not b.has_gaps()
        assert e1.id < e2.id
        assert same_tables(a, b) or b.reloads > 1
    finally:
        close([a, b])


def test_replica_spread_makes_replicas_prefer_different_hosts(db_url):
    seed = Store.open(db_url, replica="loader")
    load_fleet_into(seed, small_fleet(8), {"c1": "r1"}, now=NOW)
    seed.close()
    chosen = []
    for name in ("r-a", "r-b"):
        config = ServiceConfig(db_url=db_url, replica_id=name, replica_spread=2.0)
        r = Replica(Store.open(db_url, replica=name, migrate=False), config, lambda: NOW)
        r.reload()
        names = [w.name for w, _ in r.scheduler.weighers]
        assert "replica_spread" in names
        with r.lock:
            plan = choose(r, PlaceArgs(flavor="p4", count=1, project="default", seed=1))
        chosen.append(plan.decision.hosts[0])
        r.store.close()
    assert chosen[0] != chosen[1]  # same request, same seed, different replica: other host


@pytest.mark.parametrize(
    ("payload", "me", "expected"),
    [
        ("42:r-b", "r-a", 42),  # another replica's commit: sync up to it
        ("42:r-a", "r-a", -1),  # our own commit: its request applies it, no sync
        ("42:host:8080", "host:8080", -1),  # replica ids may hold a colon
        ("42", "r-a", 42),  # a replica of an older version announces the id alone
        ("junk", "r-a", 1 << 62),  # unknown: sync
    ],
)
def test_notification_payloads(payload, me, expected):
    assert _event_id(payload, me) == expected
