"""The fragmentation weigher's cost for floating flavors, every flavor at once, kept current.

When the placed flavor and the reference flavors all use host columns alone (no NUMA topology,
no PCI device, no pinned CPU, no huge page: ``host-only``), a host's cost depends on its free
host columns alone and is a few integer divisions::

    cap_f(h)  = max(0, min_c free_c(h) // need_fc)              over the columns f needs
    cap'_f(h) = max(0, min_c (free_c(h) - use_gc) // need_fc)
    cost_g(h) = sum_f vcpus_f * (cap_f(h) - cap'_f(h))          (float32, reference by reference)

`HostOnlyCosts` keeps ``-cost_g(h)`` (float64, the weigher's raw value) for every flavor g placed
so far and every host, and after each change of the table recomputes the changed hosts for all
those flavors in one vectorised pass over (hosts, flavors, references, columns). A decision then
reads its flavor's row: no cache that lags behind the table by tens of hosts, whatever the mix of
flavors in the trace. The values are the general path's bit for bit: the same integer counts and
the float32 sum accumulated in the same order (`tests/core/test_frag_host.py`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.numa import BIG
from berth.core.resources import H_VCPU
from berth.core.table import INT32_MAX_INT, HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

CHUNK = 2048
"""Hosts per vectorised pass when many changed (bounded temporaries)."""
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
        self.cols = np.flatnonzero(needed.any(axis=0))
        need = needed[:, self.cols].T  # (C, F)
        self.div = np.maximum(need, 1)[:, :, None, None]  # (C, F, 1, 1)
        self.unused = None if need.all() else (need == 0)[:, :, None, None]
        self.vcpus = np.array([d.spec.vcpus for d in refs], dtype=np.int64)
        # every partial sum of the float32 cost is an integer of at most F x the largest vCPU
        # capacity (vcpus_f x cap_f <= free vCPUs); below 2**24 float32 holds them exactly, so
        # the sum in integers, then cast, equals the reference-by-reference float32 sum
        self.exact = len(refs) * int(table.host_cap[:, H_VCPU].max()) < 1 << 24
        self.flavors: dict[str, int] = {}
        self.use = np.zeros((self.cols.size, 1), dtype=np.int64)  # column 0: nothing placed
        self.neg = np.zeros((0, len(table)), dtype=np.float64)
        self.seen = table.version

    @classmethod
    def build(cls, table: HostTable, refs: list[Demand]) -> HostOnlyCosts | None:
        if not refs or not all(host_only(d) for d in refs):
            return None
        if len(table) == 0 or int(table.host_cap.max()) >= INT32_MAX_INT:
            return None  # counts could reach the int32 cap of `reference_counts`
        return cls(table, refs)

    def row(self, table: HostTable, d: Demand) -> F64 | None:
        """``-cost`` of placing `d` on every host, current (read it, never write to it); None
        when `d` is not host-only or the store is full."""
        self._update(table)
        name = d.spec.name
        i = self.flavors.get(name)
        if i is None:
            if not host_only(d) or (self.neg.shape[0] + 1) * self.neg.shape[1] > MAX_VALUES:
                return None
            use = d.host[self.cols][:, None]
            column = self._costs(table, np.arange(len(table)), np.hstack([self.use[:, :1], use]))
            i = self.flavors[name] = self.neg.shape[0]
            self.use = np.hstack([self.use, use])
            self.neg = np.vstack([self.neg, column.T])
        return self.neg[i]

    def _update(self, table: HostTable) -> None:
        if self.seen == table.version:
            return
        rows = table.changed_since(self.seen)
        self.seen = table.version
        if rows.size and self.flavors:
            self.neg[:, rows] = self._costs(table, rows, self.use).T

    def _costs(self, table: HostTable, rows: I64, use: I64) -> F64:
        """``-cost`` on `rows` (r,) for the placed uses ``use[:, 1:]``: shape (r, flavors).

        Arrays are laid out (column, reference, host, flavor): the flavor axis, the longest,
        innermost, so every numpy pass runs over contiguous memory.
        """
        n_refs = self.div.shape[1]
        out = np.empty((rows.size, use.shape[1] - 1), dtype=np.float64)
        free_cols = table.host_free.T[self.cols]  # (C, hosts), contiguous rows
        for start in range(0, rows.size, CHUNK):
            part = rows[start : start + CHUNK]
            free = free_cols.take(part, axis=1)  # (C, r)
            left = free[:, None, :, None] - use[:, None, None, :]  # (C, 1, r, 1 + G)
            fit = left // self.div  # (C, F, r, 1 + G)
            if self.unused is not None:
                fit = np.where(self.unused, BIG, fit)
            counts = fit.min(axis=0) if fit.shape[0] > 2 else np.minimum(fit[0], fit[-1])
            np.maximum(counts, 0, out=counts)  # numa.host_limit: (F, r, 1 + G)
            kept = counts[:, :, 1:] - counts[:, :, :1]  # (F, r, G): after - before, <= 0
            if self.exact:  # -cost in integers (see __init__); float64(-c) == -float32(c)
                out[start : start + CHUNK] = (self.vcpus @ kept.reshape(n_refs, -1)).reshape(
                    part.size, -1
                )
                continue
            lost = kept * -self.vcpus[:, None, None]
            cost = np.zeros(lost.shape[1:], dtype=np.float32)
            for j in range(n_refs):  # float32(float64(cost) + lost), as the general path
                np.add(cost, lost[j], out=cost, casting="unsafe")
            np.negative(cost, out=out[start : start + CHUNK], dtype=np.float64)
        return out
