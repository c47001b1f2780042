"""A cache: the fragmentation weigher's cost of floating flavors, every host and flavor at once.

When the placed flavor and the reference flavors all use host columns alone (no NUMA topology,
no PCI device, no pinned CPU, no huge page: "host-only"), a host's cost depends on its free
host columns alone and is a few integer divisions::

    cap_f(h)  = max(0, min_c free_c(h) // need_fc)              over the columns f needs
    cap'_f(h) = max(0, min_c (free_c(h) - use_gc) // need_fc)
    cost_g(h) = sum_f vcpus_f * (cap_f(h) - cap'_f(h))          (float32, reference by reference)

`HostOnlyCosts` keeps ``-cost_g(h)`` (float64, the weigher's raw value) for every flavor g placed
so far and every host. After each change of the table it recomputes the changed hosts for all
those flavors, so a decision reads its flavor's column: no per-flavor cache lagging behind the
table by tens of hosts, whatever the trace's mix of flavors.

The values are the general path's bit for bit (`tests/core/test_host_only_costs.py`): the same
integer counts, summed in integers by a compiled kernel (`kernels.host_only_costs`: a changed host
costs well under a microsecond for every flavor, far less than a numpy call), then cast once to
float64; that equals the general path's float32 sum reference by reference while every partial
sum is an integer below 2**24 (F x the largest vCPU capacity; beyond, `build` declines and the
weigher keeps its per-flavor cache).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core import kernels
from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.resources import H_VCPU
from berth.core.table import INT32_MAX_INT, HostTable

F64 = npt.NDArray[np.float64]

MAX_VALUES = 1 << 22
"""Flavors x hosts kept at most (32 MiB of float64); flavors beyond fall back to the weigher's
per-flavor cache."""


def host_only(d: Demand) -> bool:
    """Whether `d` uses host columns alone (and at least one of them)."""
    spec = d.spec
    return (
        d.mode == NumaMode.NONE
        and not spec.dedicated_cpus
        and not spec.hugepages
        and not d.pci.any()
        and not d.cells.any()
        and bool(d.host.any())
    )


class HostOnlyCosts:
    """``-cost_g(h)`` for host-only flavors g and references, on every host (see module doc).

    Build with `HostOnlyCosts.build` (None when the references or the table do not qualify);
    owned by one table (`HostTable.state`) and updated in place.
    """

    def __init__(self, table: HostTable, refs: list[Demand]) -> None:
        needed = np.stack([d.host for d in refs])  # (F, host columns)
        self.cols = np.flatnonzero(needed.any(axis=0)).astype(np.int64)
        self.need = np.ascontiguousarray(needed[:, self.cols].T, dtype=np.int64)  # (C, F)
        self.vcpus = np.array([d.spec.vcpus for d in refs], dtype=np.int64)
        self.flavors: dict[str, int] = {}
        self.use = np.zeros((self.cols.size, 1), dtype=np.float64)  # column 0: nothing placed
        self.neg = np.zeros((0, len(table)), dtype=np.float64)  # (flavors, hosts)
        self.seen = table.version

    @classmethod
    def build(cls, table: HostTable, refs: list[Demand]) -> HostOnlyCosts | None:
        if not refs or not all(host_only(d) for d in refs):
            return None
        if len(table) == 0 or int(table.host_cap.max()) >= INT32_MAX_INT:
            return None  # counts could reach the int32 cap of `reference_counts`
        # every partial sum of the general path's float32 cost is an integer of at most F x
        # the largest vCPU capacity (vcpus_f x cap_f <= free vCPUs): exact below 2**24 only
        if len(refs) * int(table.host_cap[:, H_VCPU].max()) >= 1 << 24:
            return None
        return cls(table, refs)

    def row(self, table: HostTable, d: Demand) -> F64 | None:
        """``-cost`` of placing `d` on every host, current (read it, never write to it); None
        when `d` is not host-only or the store is full."""
        self._update(table)
        name = d.spec.name
        i = self.flavors.get(name)
        if i is None:
            if (
                not host_only(d)
                or int(d.host.max()) >= INT32_MAX_INT  # keeps free - use within int64
                or (self.neg.shape[0] + 1) * self.neg.shape[1] > MAX_VALUES
            ):
                return None
            use = d.host[self.cols][:, None].astype(np.float64)  # exact: below 2**31
            column = np.empty((1, len(table)), dtype=np.float64)
            alone = np.ascontiguousarray(np.hstack([self.use[:, :1], use]))
            self._costs(table, -1, alone, column)  # every host: versions are >= 0
            i = self.flavors[name] = self.neg.shape[0]
            self.use = np.ascontiguousarray(np.hstack([self.use, use]))
            self.neg = np.vstack([self.neg, column])
        return self.neg[i]

    def _update(self, table: HostTable) -> None:
        if self.seen == table.version:
            return
        if self.flavors:
            self._costs(table, self.seen, self.use, self.neg)
        self.seen = table.version

    def _costs(self, table: HostTable, since: int, use: F64, out: F64) -> None:
        kernels.host_only_costs(
            table.host_free, table.touched, since, self.cols, self.need, use, self.vcpus, out
        )
