"""What a live migration may do: which instances move, which hosts may take them, which
footprints are legal. Shared by the planner, `check_plan`, `apply_moves` and `replan_move`.

A migration is a placement of the same instance (flavor, server group, project) that keeps its
availability zone, so host eligibility is the scheduler's own filter masks on the table as it is
at that moment (with the instance still on its source and every in-flight move counted).
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.core.filters.base import Context
from berth.core.filters.traits import trait_mask
from berth.core.flavors import NumaMode
from berth.core.model import GroupPolicy
from berth.core.numa import wide
from berth.core.request import RequestSpec
from berth.core.resources import CELL_BASE
from berth.core.table import Allocation, HostTable

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


class PlanError(BerthError):
    """A plan step is invalid on the fleet; `step` is the failing move's position."""

    def __init__(self, step: int, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.step = step
        self.message = message


def immovable(table: HostTable, alloc: Allocation) -> str | None:
    """Why this instance may never be migrated, or None when it may.

    Members of hard affinity groups stay: moving one alone would split the group, and the
    planner does not move whole groups (docs/defrag.md).
    """
    if not alloc.migratable:
        return f"instance {alloc.instance_id!r} is marked not migratable"
    if alloc.server_group is not None:
        group = table.groups.get(alloc.server_group)
        if group is not None and group.policy == GroupPolicy.AFFINITY:
            return (
                f"instance {alloc.instance_id!r} is a member of affinity group "
                f"{alloc.server_group!r}"
            )
    return None


def anti_affinity_ok(table: HostTable, alloc: Allocation, row: int) -> bool:
    """The target row may take one more member of the instance's anti-affinity group."""
    if alloc.server_group is None:
        return True
    group = table.groups.get(alloc.server_group)
    if group is None or group.policy != GroupPolicy.ANTI_AFFINITY:
        return True
    held = table.group_rows.get(group.id, {}).get(row, 0)
    return held < group.max_server_per_host


def footprint_error(table: HostTable, flavor: str, cell_use: I64, host_use: I64) -> str | None:
    """Why a stated footprint is not one instance of `flavor` (None when it is).

    It must take exactly the flavor's host columns and its total per cell column, on the cells
    its NUMA mode allows (one cell, an even split, the stated uneven split either way round, or a
    flexible split above the per-cell minimums).
    """
    d = table.demand(flavor)
    width = CELL_BASE + len(table.device_types)
    if cell_use.shape != (table.cell_cap.shape[1], width) or host_use.shape != d.host.shape:
        return "footprint has the wrong shape for this fleet"
    if (cell_use < 0).any() or (host_use < 0).any():
        return "footprint has a negative amount"
    if not np.array_equal(host_use, d.host):
        return f"host-level footprint {host_use.tolist()} is not flavor {flavor!r}'s"
    total = d.total.copy()
    total[CELL_BASE:] += d.pci
    if d.mode == NumaMode.NONE:
        total[:CELL_BASE] = 0  # a floating guest takes only host columns (and PCI devices)
    if not np.array_equal(cell_use.sum(axis=0), total):
        return f"per-cell footprint does not add up to flavor {flavor!r}"
    core = cell_use[:, :CELL_BASE]
    used = [c for c in range(core.shape[0]) if core[c].any()]
    mode = d.mode
    if mode == NumaMode.NONE:
        ok = not used
    elif mode in (NumaMode.SINGLE, NumaMode.EVEN, NumaMode.FIXED):  # the guest's cells, any order
        ok = sorted(core[c].tolist() for c in used) == sorted(
            row.tolist() for row in d.cells[:, :CELL_BASE]
        )
    else:  # FLEX
        ok = len(used) == 2 and bool((core[used] >= d.cells[0, :CELL_BASE]).all())
    if not ok:
        return f"per-cell footprint is not a legal NUMA split of flavor {flavor!r}"
    if mode == NumaMode.NONE:
        return None
    local = d.cells[0, CELL_BASE:].any() or (wide.local_pci(d) and core.shape[0] > 2)
    others = [c for c in range(core.shape[0]) if c not in used]
    if local and cell_use[others, CELL_BASE:].any():
        return f"flavor {flavor!r} needs its PCI devices on its own NUMA cells"
    return None


class TargetRules:
    """Hosts that may take a migrating instance now: the scheduler's filters plus the
    migration's own rules (same zone, enabled, not draining, not excluded, not the source, and
    the source's subset of `keep_traits`: a pool's instances stay in their pool).

    Request-independent filter masks are cached per request shape for the lifetime of this
    object; the table's `derived` caches keep the resource counts exact incrementally.
    """

    def __init__(
        self,
        scheduler: FilterScheduler,
        now: float,
        blocked: Mask,
        keep_traits: tuple[str, ...] | frozenset[str] = (),
    ) -> None:
        self.scheduler = scheduler
        self.now = now
        self.blocked = blocked
        self.keep_traits = frozenset(keep_traits)
        self._static: dict[Hashable, Mask] = {}
        # filters a NUMA-exact count of one (`mask` applies it, the page size is in the static
        # part) already implies are skipped
        self._dynamic = [f for f in scheduler.filters if not f.static and not f.implied_by_count]

    def request(self, table: HostTable, alloc: Allocation) -> RequestSpec:
        zone = table.zones.words[int(table.zone[table.index[alloc.host]])]
        return RequestSpec(
            flavor=alloc.flavor,
            availability_zone=zone,
            server_group=alloc.server_group,
            project=alloc.project,
            instance_ids=(alloc.instance_id + "~migrating",),
        )

    def static_mask(self, table: HostTable, alloc: Allocation) -> Mask:
        """The part of `mask` that claims cannot change: the request-independent filters, the
        zone, enabled, huge-page size, not blocked (cached per request shape; read only)."""
        request = self.request(table, alloc)
        source = table.index[alloc.host]
        keep = self._keep_words(table)
        kept = None if keep is None else table.trait_bits[source] & keep
        key = (
            alloc.flavor,
            alloc.server_group,
            alloc.project,
            request.availability_zone,
            None if kept is None else kept.tobytes(),
        )
        static = self._static.get(key)
        if static is None:
            ctx = Context(table, request, table.demand(alloc.flavor), self.now)
            static = ~self.blocked & table.enabled
            static &= table.zone == table.zone[source]
            if keep is not None and kept is not None:
                static &= ((table.trait_bits & keep) == kept).all(axis=1)
            static &= table.page_size_ok(ctx.demand.spec)
            for flt in self.scheduler.filters:
                if flt.static:
                    static &= flt.mask(ctx)
            self._static[key] = static
        return static

    def _keep_words(self, table: HostTable) -> npt.NDArray[np.uint64] | None:
        """Bit words of the `keep_traits` some host carries (None when there are none)."""
        known = {t for t in self.keep_traits if table.traits.get(t) >= 0}
        if not known:
            return None
        return trait_mask(table, known)

    def mask(self, table: HostTable, alloc: Allocation, *, exclude_source: bool = True) -> Mask:
        """Every host that may take `alloc` now (the source excluded unless told otherwise:
        a caller may reuse the mask for instances of the same shape on other hosts)."""
        request = self.request(table, alloc)
        ctx = Context(table, request, table.demand(alloc.flavor), self.now)
        out = self.static_mask(table, alloc) & (table.resource_counts(alloc.flavor) >= 1)
        for flt in self._dynamic:
            out &= flt.mask(ctx)
        if alloc.server_group is not None:
            group = table.groups.get(alloc.server_group)
            if group is not None and group.policy == GroupPolicy.ANTI_AFFINITY:
                out &= table.group_count(group.id) < group.max_server_per_host
        if exclude_source:
            out[table.index[alloc.host]] = False
        return out
