"""The fragmentation weigher's cost for floating flavors, every flavor at once, kept current.

When the placed flavor and the reference flavors all use host columns alone (no NUMA topology,
no PCI device, no pinned CPU, no huge page: "host-only"), a host's cost depends on its free
host columns alone and is a few integer divisions::

    cap_f(h)  = max(0, min_c free_c(h) // need_fc)              over the columns f needs
    cap'_f(h) = max(0, min_c (free_c(h) - use_gc) // need_fc)
    cost_g(h) = sum_f vcpus_f * (cap_f(h) - cap'_f(h))          (float32, reference by reference)

`HostOnlyCosts` keeps ``-cost_g(h)`` (float64, the weigher's raw value) for every flavor g placed
so far and every host. After each change of the table it recomputes the changed hosts for all
those flavors in one vectorised pass, so a decision reads its flavor's column: no per-flavor
cache lagging behind the table by tens of hosts, whatever the trace's mix of flavors. Hosts
often come back to a free state some host had before (two changes in three on the Azure
sample), so a few changed hosts are first looked up by state (a memo of every flavor's costs).

The values are the general path's bit for bit (`tests/core/test_frag_host.py`): the same integer
counts, and a float32 sum that is exact (hence equal to the integer sum) while F x the largest
vCPU capacity stays below 2**24; beyond, it is accumulated reference by reference as there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.resources import H_VCPU
from berth.core.table import INT32_MAX_INT, HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

MEMO_ROWS = 8
"""Up to this many changed hosts, costs are looked up by free state before any is computed."""
CHUNK = 2048
"""Hosts per vectorised pass when many changed (bounded temporaries)."""
MAX_VALUES = 1 << 22
"""Flavors x hosts kept at most (32 MiB of float64); flavors beyond fall back to the weigher's
per-flavor cache. The memo of states holds at most as many values (then starts afresh): 64 MiB
per table and reference set in all (about 21 MiB on the Azure sample at 1,000 hosts)."""


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
        self.need = needed[:, self.cols].T  # (C, F): 0 where a reference does not count
        self.vcpus = np.array([d.spec.vcpus for d in refs], dtype=np.float64)
        # every partial sum of the float32 cost is an integer of at most F x the largest vCPU
        # capacity (vcpus_f x cap_f <= free vCPUs); below 2**24 float32 holds them exactly, so
        # the sum in integers, then cast, equals the reference-by-reference float32 sum
        self.exact = len(refs) * int(table.host_cap[:, H_VCPU].max()) < 1 << 24
        self.flavors: dict[str, int] = {}
        self.use = np.zeros((self.cols.size, 1), dtype=np.int64)  # column 0: nothing placed
        self.plan = self._plan(self.use)
        self.memo: dict[tuple[int, ...], F64] = {}
        """-cost of every flavor by free host columns: hosts often return to a state."""
        self.memo_limit = 0
        self.neg = np.zeros((0, len(table)), dtype=np.float64)  # (flavors, hosts)
        self.seen = table.version

    def _plan(self, use: I64) -> Plan:
        """The flat (column, reference, placed) layout of one pass (see `_costs`)."""
        c, f = self.need.shape
        shape = (c, f, use.shape[1])
        return Plan(
            shape=shape,
            columns=np.repeat(self.cols, f * use.shape[1]),
            use=np.broadcast_to(use[:, None, :], shape).ravel(),
            div=np.broadcast_to(np.maximum(self.need, 1)[:, :, None], shape)
            .astype(np.float64)
            .ravel(),
            unused=None
            if self.need.all()
            else np.broadcast_to((self.need == 0)[:, :, None], shape).ravel(),
        )

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
            if (
                not host_only(d)
                or int(d.host.max()) >= INT32_MAX_INT  # keeps |free - use| far below 2**53
                or (self.neg.shape[0] + 1) * self.neg.shape[1] > MAX_VALUES
            ):
                return None
            use = d.host[self.cols][:, None]
            alone = self._plan(np.hstack([self.use[:, :1], use]))
            column = self._costs(table, np.arange(len(table)), alone)
            i = self.flavors[name] = self.neg.shape[0]
            self.use = np.hstack([self.use, use])
            self.plan = self._plan(self.use)
            self.memo = {}  # its rows lack the new flavor
            self.memo_limit = MAX_VALUES // (i + 1)
            self.neg = np.vstack([self.neg, column.T])
        return self.neg[i]

    def _update(self, table: HostTable) -> None:
        if self.seen == table.version:
            return
        recent = table.recent_changes(self.seen)
        seen, self.seen = self.seen, table.version
        if not self.flavors:
            return
        if recent is None or len(recent) > MEMO_ROWS:
            rows = table.changed_since(seen)
            self.neg[:, rows] = self._costs(table, rows, self.plan).T
            return
        # a few hosts: many reach a free state some host had before; reuse its costs
        free, memo, neg = table.host_free, self.memo, self.neg
        missed: list[tuple[int, tuple[int, ...]]] = []
        for row in dict.fromkeys(recent):  # each changed row once
            key = tuple(free[row].tolist())
            known = memo.get(key)
            if known is None:
                missed.append((row, key))
            else:
                neg[:, row] = known
        if missed:
            if len(memo) + len(missed) > self.memo_limit:
                memo.clear()
            fresh = self._costs(table, np.array([r for r, _ in missed]), self.plan)
            for (row, key), values in zip(missed, fresh, strict=True):
                neg[:, row] = memo[key] = values

    def _costs(self, table: HostTable, rows: I64, plan: Plan) -> F64:
        """``-cost`` on `rows` (r,) for the plan's placed flavors: shape (r, flavors).

        One flat pass per step over (host, column, reference, placed flavor), the placed
        flavor innermost (index 0: nothing placed, the counts before): few numpy calls, each
        over contiguous memory.
        """
        n_cols, n_refs, width = plan.shape
        out = np.empty((rows.size, width - 1), dtype=np.float64)
        for start in range(0, rows.size, CHUNK):
            part = rows[start : start + CHUNK]
            left = table.host_free[part].take(plan.columns, axis=1)  # (r, C * F * (1 + G))
            left -= plan.use
            # floor of the float64 quotient == integer floor division: |left| < 2**53 and the
            # divisor >= 1, so the rounding error stays below the gap to the next integer
            fit = np.divide(left, plan.div)
            np.floor(fit, out=fit)
            if plan.unused is not None:
                fit[:, plan.unused] = np.inf  # numa.host_limit skips the column
            fit = fit.reshape(part.size, n_cols, n_refs, width)
            if n_cols == 1:
                counts = fit[:, 0]
            elif n_cols == 2:
                counts = np.minimum(fit[:, 0], fit[:, 1])
            else:
                counts = fit.min(axis=1)
            np.maximum(counts, 0.0, out=counts)  # numa.host_limit: (r, F, 1 + G), integers
            if self.exact:  # -cost, exact in float64 (see __init__); float64(-c) == -float32(c)
                kept = np.matmul(self.vcpus, counts)  # (r, 1 + G): sum_f vcpus_f x count_f
                np.subtract(kept[:, 1:], kept[:, :1], out=out[start : start + CHUNK])
                continue
            lost = (counts[:, :, :1] - counts[:, :, 1:]) * self.vcpus[:, None]
            cost = np.zeros((part.size, width - 1), dtype=np.float32)
            for j in range(n_refs):  # float32(float64(cost) + lost), as the general path
                np.add(cost, lost[:, j], out=cost, casting="unsafe")
            np.negative(cost, out=out[start : start + CHUNK], dtype=np.float64)
        return out


@dataclass(frozen=True)
class Plan:
    """One pass of `HostOnlyCosts._costs`, flattened: for each (column, reference, placed
    flavor) the host column read, the amount placed, the divisor, and whether it counts."""

    shape: tuple[int, int, int]
    columns: I64
    use: I64
    div: F64
    unused: npt.NDArray[np.bool_] | None
