"""The claim transaction re-checks an affinity set against the rows, on SQLite and PostgreSQL.

Each claim here passes the current generations of its hosts and its set, as a replica whose
cache missed the set's members would: only the re-verification of the rows can refuse it. Both
commit paths run (the general one, and PostgreSQL's two round trips without evictions).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from berth.core.table import HostTable
from berth.service.demo import load_fleet_into
from berth.store.errors import PlanRejectedError
from berth.store.footprint import to_named
from berth.store.repo import GroupRow, HostCapacity, NewInstance, Store
from tests.store.fleets import NOW, small_fleet

FLEET = small_fleet(2, zones=("c1", "c2"))


def _loaded(store: Store) -> None:
    load_fleet_into(store, FLEET, {"c1": "r1", "c2": "r1"}, now=NOW)
    store.add_group(GroupRow("aff", "default", "affinity", 1, None, 0))


def _claim(store: Store, placement: str, hosts: Sequence[str]) -> None:
    """Claim one `p4` member of set `aff` per host named, with current generations."""
    table = HostTable.from_fleet(FLEET.model_copy(update={"instances": []}))
    new, caps = [], {}
    for n, name in enumerate(hosts):
        row = table.index[name]
        cell_use, host_use = table.plan_for("p4", row)
        new.append(
            NewInstance(
                id=f"{placement}-{n}",
                host=name,
                cluster=store.get_host(name).cluster,
                flavor="p4",
                footprint=to_named(cell_use, host_use, table.device_types),
                project="default",
                server_group="aff",
            )
        )
        caps[name] = HostCapacity(
            table.cell_cap[row].copy(), table.host_cap[row].copy(), list(table.device_types)
        )
    group = next(g for g in store.list_groups() if g.id == "aff")
    store.commit_placement(
        placement_id=placement,
        instances=new,
        host_generations={h: store.get_host(h).generation for h in set(hosts)},
        group_generations={group.key: group.generation},
        capacities=caps,
    )


def test_an_affinity_set_is_refused_a_second_host_even_in_another_cluster(store: Store) -> None:
    _loaded(store)
    _claim(store, "p-1", ["h-c1-0"])
    counts = store.counts()
    for elsewhere in (["h-c1-1"], ["h-c2-0"], ["h-c1-0", "h-c2-0"]):
        with pytest.raises(PlanRejectedError, match="affinity"):
            _claim(store, "p-2", elsewhere)
        assert store.counts() == counts
    _claim(store, "p-3", ["h-c1-0"])  # its own host takes more members
    assert sorted(store.group_members("default", "aff")) == ["p-1-0", "p-3-0"]


def test_the_first_members_of_an_affinity_set_go_to_one_host(store: Store) -> None:
    _loaded(store)
    counts = store.counts()
    with pytest.raises(PlanRejectedError, match="affinity"):
        _claim(store, "p-1", ["h-c1-0", "h-c2-0"])
    assert store.counts() == counts
    _claim(store, "p-2", ["h-c2-0", "h-c2-0"])
    assert sorted(store.group_members("default", "aff")) == ["p-2-0", "p-2-1"]
