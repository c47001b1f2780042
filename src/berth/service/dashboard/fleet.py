"""The fleet as the dashboard shows it: per pool, then summed up to cluster, IDC and region.

Each figure is computed over the replica's own tables, column by column (numpy over every host,
no loop over hosts), with the same calls the API makes: remaining capacity is
`FilterScheduler.capacity` per flavor, exactly what `GET /v1/capacity?by=pool` sums, so the page
and the API agree number for number (tests/dashboard/test_pages.py). Host states are exclusive,
in this order: draining (marked for drain; the replica disables it in its table), disabled,
down (no heartbeat within `service_down_time`), up.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.resources import C_MEM, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable
from berth.service.replica import ClusterView, Replica

I64 = npt.NDArray[np.int64]
STATES = ("up", "down", "disabled", "draining")
FIGURES = ("vcpus", "vcpus_used", "pinned", "pinned_used", "memory_mb", "memory_mb_used")


@dataclass
class Node:
    """A region, IDC, cluster or pool: its host counts by state, usage figures and capacity."""

    kind: str
    name: str
    key: str
    hosts: int = 0
    states: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIGURES, 0))
    capacity: dict[str, int] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)

    def add(self, other: Node) -> None:
        self.hosts += other.hosts
        for k, v in other.states.items():
            self.states[k] += v
        for k, v in other.usage.items():
            self.usage[k] += v
        for k, v in other.capacity.items():
            self.capacity[k] = self.capacity.get(k, 0) + v

    def percent(self, what: str) -> float | None:
        """Share used of `what` (vcpus, pinned, memory_mb) in percent; None without any."""
        total = self.usage[what]
        return None if total == 0 else 100.0 * self.usage[f"{what}_used"] / total

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "key": self.key,
            "hosts": self.hosts,
            "states": self.states,
            "usage": self.usage,
            "capacity": self.capacity,
            "children": [c.to_dict() for c in self.children],
        }


def host_states(table: HostTable, draining: set[str], now: float, down_after: float) -> I64:
    """Each host's state as an index into STATES (exclusive, draining first)."""
    names = np.asarray(table.names, dtype=object)
    drain = (
        np.isin(names, list(draining)) if draining and len(names) else np.zeros(len(names), bool)
    )
    beat = table.heartbeat
    down = np.isnan(beat) | (beat < now - down_after)
    state = np.zeros(len(table), dtype=np.int64)
    state[down] = 1
    state[~table.enabled] = 2
    state[drain] = 3
    return state


def usage_columns(table: HostTable) -> dict[str, I64]:
    """Per host: capacity and use of shared vCPUs, pinned CPUs and memory, as
    `Replica.host_usage` (and so `GET /v1/hosts`) reports them."""
    cap, free = table.cell_cap, table.cell_free
    cell_mem = cap[:, :, C_MEM].sum(axis=1)
    cell_mem_used = (cap[:, :, C_MEM] - free[:, :, C_MEM]).sum(axis=1)
    return {
        "vcpus": table.host_cap[:, H_VCPU],
        "vcpus_used": table.host_cap[:, H_VCPU] - table.host_free[:, H_VCPU],
        "pinned": cap[:, :, C_PCPU].sum(axis=1),
        "pinned_used": (cap[:, :, C_PCPU] - free[:, :, C_PCPU]).sum(axis=1),
        "memory_mb": np.maximum(table.host_cap[:, H_MEM], cell_mem),
        "memory_mb_used": np.maximum(
            table.host_cap[:, H_MEM] - table.host_free[:, H_MEM], cell_mem_used
        ),
    }


def pool_codes(view: ClusterView) -> tuple[list[str], I64]:
    """The cluster's pool names ("-" for hosts in none) and each host's index into them."""
    if not view.pool_of:
        return [], np.zeros(0, dtype=np.int64)
    pools = np.asarray(view.pool_of, dtype=object)
    pools[pools == None] = "-"  # noqa: E711 (elementwise on an object array)
    names, inverse = np.unique(pools.astype(str), return_inverse=True)
    return [str(n) for n in names], inverse.astype(np.int64)


def _sums(codes: I64, n: int, values: npt.NDArray[Any]) -> I64:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, codes, values.astype(np.int64))
    return out


def cluster_pools(
    replica: Replica, view: ClusterView, flavors: list[str], now: float
) -> list[Node]:
    """One node per pool of an active cluster (caller holds `replica.lock`)."""
    table = view.table
    names, codes = pool_codes(view)
    n = len(names)
    nodes = [Node("pool", name, f"{view.name}/{name}") for name in names]
    state = host_states(table, replica.draining, now, replica.config.service_down_time)
    hosts = np.bincount(codes, minlength=n)
    by_state = np.zeros((n, len(STATES)), dtype=np.int64)
    np.add.at(by_state, (codes, state), 1)
    usage = {k: _sums(codes, n, v) for k, v in usage_columns(table).items()}
    counts = {f: _sums(codes, n, capacity_column(replica, table, f, now)) for f in flavors}
    for i, node in enumerate(nodes):
        node.hosts = int(hosts[i])
        node.states = {s: int(by_state[i, j]) for j, s in enumerate(STATES)}
        node.usage = {k: int(v[i]) for k, v in usage.items()}
        node.capacity = {f: int(c[i]) for f, c in counts.items()}
    return nodes


def capacity_column(replica: Replica, table: HostTable, flavor: str, now: float) -> I64:
    """What `Replica.capacity` counts for one flavor on one table."""
    if flavor not in table.flavors:
        return np.zeros(len(table), dtype=np.int64)
    return replica.scheduler.capacity(table, flavor, now)


def overview(replica: Replica, flavors: list[str], now: float | None = None) -> Node:
    """The fleet: regions -> IDCs -> clusters -> pools (active clusters, as capacity counts)."""
    when = replica.clock() if now is None else now
    fleet = Node("fleet", "fleet", "fleet")
    with replica.lock:
        parents = dict(replica.regions)
        idcs: dict[str, Node] = {}
        for view in sorted(replica.clusters.values(), key=lambda v: v.name):
            if view.state != "active":
                continue
            cluster = Node("cluster", view.name, view.name)
            for pool in cluster_pools(replica, view, flavors, when):
                cluster.add(pool)
                cluster.children.append(pool)
            idc = idcs.setdefault(view.region, Node("idc", view.region, view.region))
            idc.add(cluster)
            idc.children.append(cluster)
    regions: dict[str, Node] = {}
    for name, idc in sorted(idcs.items()):
        top = parents.get(name) or name
        region = regions.setdefault(top, Node("region", top, top))
        region.add(idc)
        region.children.append(idc)
    for region in regions.values():
        fleet.add(region)
        fleet.children.append(region)
    return fleet


class OverviewCache:
    """The last overview computed, reused while nothing it depends on moved: the flavors asked,
    the event log (every claim, release, host state or drain is an event), the replica's
    reloads, and a `ttl`-second slot of the clock (hosts go down by the clock, without an
    event). Pages and their live refreshes then cost one computation per change, however many
    browsers watch."""

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._key: tuple[object, ...] | None = None
        self._value: Node | None = None
        self._lock = threading.Lock()

    def get(self, replica: Replica, flavors: list[str]) -> Node:
        now = replica.clock()
        key = (tuple(flavors), replica.last_event, replica.reloads, int(now // self.ttl))
        with self._lock:
            if key == self._key and self._value is not None:
                return self._value
            value = overview(replica, flavors, now)
            self._key, self._value = key, value
            return value


def default_flavors(names: list[str], family: str | None) -> list[str]:
    """The flavors a page shows: a family's flavors and variants (`c3`), else every base flavor
    (no variant suffix: one dot at most), else all."""
    if family:
        return [n for n in names if n.split(".")[0] == family]
    base = [n for n in names if n.count(".") <= 1]
    return base or names


def families(names: list[str]) -> list[str]:
    return sorted({n.split(".")[0] for n in names})
