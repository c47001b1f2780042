"""Row-lock order on PostgreSQL: the bulk heartbeat and placements never deadlock.

A placement locks the host rows it touches in name order (`berth.store.pgclaim`); the bulk
heartbeat of `berth serve --simulate-agents` (`Store.touch_heartbeats`) updates every live host
in one statement. If that statement locked the rows in the order it finds them on disk, the two
would deadlock; PostgreSQL aborts one of them (40P01) and the service answers 503. The detector
is made to run after 20 ms instead of a second, so that a few seconds show it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from berth.core.table import HostTable
from berth.service.demo import load_fleet_into
from berth.store.footprint import to_named
from berth.store.repo import HostCapacity, NewInstance, Store
from tests.store.dbs import truncate_pg
from tests.store.fleets import NOW, small_fleet

HOSTS = 40
SPREAD = 12
SECONDS = 3.0


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    truncate_pg(pg_url)
    sep = "&" if "?" in pg_url else "?"
    store = Store.open(f"{pg_url}{sep}options=-c%20deadlock_timeout%3D20ms", replica="locks")
    load_fleet_into(store, small_fleet(HOSTS), {"c1": "r1"}, now=NOW)
    yield store
    store.close()


def _beats(store: Store, until: float, errors: list[str]) -> int:
    now, rounds = NOW, 0
    while time.monotonic() < until:
        now += 1.0
        try:
            store.touch_heartbeats(now, 1e6)
            rounds += 1
        except Exception as exc:
            errors.append(f"heartbeat: {str(exc).splitlines()[0]}")
    return rounds


def _place(store: Store, worker: int, until: float, errors: list[str]) -> int:
    """Claim one s2 instance on each of SPREAD hosts, release them, repeat; how many claims."""
    fleet = small_fleet(HOSTS)
    table = HostTable.from_fleet(fleet)
    names = sorted(h.name for h in fleet.hosts)
    k = done = 0
    while time.monotonic() < until:
        k += 1
        start = (k * 7 + worker * 13) % (HOSTS - SPREAD)
        new, caps, gens = [], {}, {}
        for j, name in enumerate(names[start : start + SPREAD]):
            row = table.index[name]
            cells, whole = table.plan_for("s2", row)
            footprint = to_named(cells, whole, table.device_types)
            new.append(NewInstance(f"vm-{worker}-{k}-{j}", name, "c1", "s2", footprint, "p"))
            caps[name] = HostCapacity(table.cell_cap[row], table.host_cap[row], table.device_types)
            gens[name] = store.get_host(name).generation
        try:
            store.commit_placement(
                placement_id=f"p-{worker}-{k}",
                instances=new,
                host_generations=gens,
                group_generations={},
                capacities=caps,
            )
        except Exception as exc:  # a generation race is expected; a deadlock is the bug
            errors.append(f"placement: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        done += 1
        for inst in new:
            try:
                store.release(inst.id)
            except Exception as exc:
                errors.append(f"release: {str(exc).splitlines()[0]}")
    return done


def test_bulk_heartbeat_and_placements_do_not_deadlock(pg_store: Store) -> None:
    until = time.monotonic() + SECONDS
    errors: list[str] = []
    counts: dict[str, int] = {}

    def run(name: str, fn: object, *args: object) -> None:
        counts[name] = fn(pg_store, *args, until, errors)  # type: ignore[operator]

    threads = [threading.Thread(target=run, args=("beats", _beats))] + [
        threading.Thread(target=run, args=(f"place{w}", _place, w)) for w in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=SECONDS + 30)
    deadlocks = [e for e in errors if "deadlock" in e.lower()]
    assert deadlocks == [], f"{len(deadlocks)} deadlocks: {deadlocks[:3]}"
    others = [e for e in errors if "GenerationConflictError" not in e]
    assert others == []
    assert counts["beats"] > 10, counts
    assert counts["place0"] + counts["place1"] > 10, counts


def test_a_bulk_heartbeat_aborted_as_a_deadlock_runs_again(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer locking two hosts out of name order deadlocks with the bulk heartbeat; its
    detector runs after 30 s, the heartbeat's after 1 s, so PostgreSQL aborts the heartbeat,
    which runs again once the other writer commits, and returns normally."""
    caplog.set_level(logging.INFO, logger="berth.store")
    truncate_pg(pg_url)
    store = Store.open(pg_url, replica="locks")
    load_fleet_into(store, small_fleet(HOSTS), {"c1": "r1"}, now=NOW)
    other = psycopg.connect(pg_url, options="-c deadlock_timeout=30s")
    result: list[object] = []
    try:
        other.execute("UPDATE hosts SET generation = generation + 1 WHERE name = 'h-c1-5'")
        beat = threading.Thread(
            target=lambda: result.append(_call(store.touch_heartbeats, NOW + 100, 1e6))
        )
        beat.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        deadline = time.monotonic() + 10
        while other.execute(waiting).fetchone() == (0,) and time.monotonic() < deadline:
            time.sleep(0.01)
        # blocks on the heartbeat's lock of h-c1-0 until PostgreSQL aborts the heartbeat
        other.execute("UPDATE hosts SET generation = generation + 1 WHERE name = 'h-c1-0'")
        other.commit()
        beat.join(timeout=30)
    finally:
        other.close()
        store.close()
    assert result == [HOSTS]
    assert any("deadlock" in r.getMessage() for r in caplog.records)


def _call(fn: Callable[..., object], *args: object) -> object:
    try:
        return fn(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
