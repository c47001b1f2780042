"""The two commit paths of `Store.commit_placement` agree: the general one (SQLite here) and the
two-round-trip one of PostgreSQL (`berth.store.pgclaim`).

Hypothesis draws sequences of claims (one to three instances, current or stale generations of
hosts and of a deployment set, a network with too few IPs or enough, a reused idempotency key,
footprints that over-commit once hosts fill up) and releases; each runs on both stores, and
after every step the outcome (which error, if any) and everything the rows say (instances,
generations, IPs, events) must be the same.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.core.table import HostTable
from berth.service.demo import load_fleet_into
from berth.store.footprint import to_named
from berth.store.repo import HostCapacity, Idempotent, NewInstance, Outcome, Store
from tests.store.dbs import truncate_pg
from tests.store.fleets import NOW, small_fleet

HOSTS = ["h-c1-0", "h-c1-1", "h-c1-2", "h-c1-3"]

claims = st.fixed_dictionaries(
    {
        "op": st.just("claim"),
        "hosts": st.lists(st.sampled_from(HOSTS), min_size=1, max_size=3),
        "flavor": st.sampled_from(["p4", "p8", "s2"]),
        "stale_host": st.sampled_from([False, False, True]),
        "group": st.sampled_from([None, None, "web"]),
        "stale_group": st.sampled_from([False, False, True]),
        "network": st.sampled_from([None, None, "tiny", "wide"]),
        "key": st.sampled_from([None, None, "k1", "k2"]),
    }
)
releases = st.fixed_dictionaries({"op": st.just("release"), "which": st.integers(0, 20)})
programs = st.lists(st.one_of(claims, claims, releases), min_size=1, max_size=12)


@pytest.fixture
def stores(tmp_path: Path, pg_url: str, migrated_sqlite: Path) -> tuple[Path, str, Path]:
    return tmp_path, pg_url, migrated_sqlite


def _fresh(kind: str, tmp: Path, pg_url: str, n: int, migrated: Path) -> Store:
    if kind == "sqlite":
        db = tmp / f"claims-{n}.db"
        shutil.copy(migrated, db)  # empty, at the head revision, as the truncated PostgreSQL
        url = f"sqlite:///{db}"
    else:
        truncate_pg(pg_url)
        url = pg_url
    store = Store.open(url, replica="test")
    load_fleet_into(store, small_fleet(), {"c1": "r1"}, now=NOW)
    store.add_ip_pool("tiny", "c1", "10.0.0.0/30", 2)
    store.add_ip_pool("wide", "c1", "10.0.1.0/24", 100)
    return store


def _claim(store: Store, step: dict[str, Any], k: int) -> None:
    table = HostTable.from_fleet(small_fleet())  # an empty table: plans ignore current use
    types = table.device_types
    new, caps, gens = [], {}, {}
    for j, name in enumerate(step["hosts"]):
        row = table.index[name]
        cell_use, host_use = table.plan_for(step["flavor"], row)
        new.append(
            NewInstance(
                f"vm-{k}-{j}",
                name,
                "c1",
                step["flavor"],
                to_named(cell_use, host_use, types),
                "default",
                step["group"],
                network=step["network"],
            )
        )
        caps[name] = HostCapacity(table.cell_cap[row], table.host_cap[row], types)
        gens[name] = store.get_host(name).generation + (1 if step["stale_host"] else 0)
    groups = {}
    if step["group"] is not None:
        current = {g.id: g.generation for g in store.list_groups()}[step["group"]]
        groups[f"default/{step['group']}"] = current + (1 if step["stale_group"] else 0)
    idem = None
    if step["key"] is not None:
        idem = Idempotent("token:t", step["key"], "digest", 201, {"step": k})
    store.commit_placement(
        placement_id=f"p-{k}",
        instances=new,
        host_generations=gens,
        group_generations=groups,
        capacities=caps,
        idempotent=idem,
        outcome=Outcome("success", "placed", step["flavor"], "default", len(new), 1.0),
    )


def _run(store: Store, step: dict[str, Any], k: int) -> str:
    """One step; the name of the error it raised ("ok" when none)."""
    try:
        if step["op"] == "claim":
            _claim(store, step, k)
        else:
            ids = sorted(i.id for i in store.list_instances() if i.id.startswith("vm-"))
            if not ids:
                return "nothing to release"
            store.release(ids[step["which"] % len(ids)])
    except Exception as exc:  # compared between the stores, never swallowed silently
        return type(exc).__name__
    return "ok"


def _rows(store: Store, after: int) -> dict[str, Any]:
    """Everything the rows say about the claims, in a form comparable across databases."""
    events = [
        (e.kind, e.host, e.generation, {k: v for k, v in e.payload.items() if k != "created_at"})
        for e in store.events_after(after, limit=10_000)
    ]
    return {
        "instances": sorted(
            (i.id, i.host, i.server_group, i.network, json.dumps(i.placement, sort_keys=True))
            for i in store.list_instances()
        ),
        "hosts": sorted((h.host.name, h.generation) for h in store.list_hosts()),
        "sets": sorted((g.id, g.generation) for g in store.list_groups()),
        "ips": [(n["name"], n["used"]) for n in store.list_ip_pools()],
        "events": events,
        "successes": sum(d["successes"] for d in store.stats()),
        "keys": sorted(k for k in ("k1", "k2") if store.get_idempotent("token:t", k) is not None),
    }


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=programs)
def test_both_commit_paths_write_the_same_rows(
    stores: tuple[Path, str, Path], program: list[Any]
) -> None:
    tmp, pg_url, migrated = stores
    n = len(list(tmp.glob("claims-*.db")))
    pair = [_fresh(kind, tmp, pg_url, n, migrated) for kind in ("sqlite", "postgresql")]
    try:
        assert pair[0].sqlite
        assert not pair[1].sqlite
        base = [s.latest_event_id() for s in pair]
        for k, step in enumerate(program):
            outcomes = [_run(s, step, k) for s in pair]
            assert outcomes[0] == outcomes[1], (k, step, outcomes)
            assert _rows(pair[0], base[0]) == _rows(pair[1], base[1]), (k, step)
    finally:
        for s in pair:
            s.close()
