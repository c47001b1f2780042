"""Packing a plan's sequential moves into waves of concurrent live migrations.

A wave's moves run at once, so each must fit with every claim of the wave made and every
source of the wave still held (docs/defrag.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.defrag.journal import Journal
from berth.core.defrag.model import Budget, Move
from berth.core.defrag.rules import PlanError, TargetRules, anti_affinity_ok
from berth.core.errors import ClaimError
from berth.core.table import Allocation, HostTable

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Step:
    """One sequential move as planned: the instance as it was, where it goes, exactly."""

    alloc: Allocation
    target: str
    cell_use: I64
    host_use: I64


def pack_waves(
    table: HostTable, steps: Sequence[Step], budget: Budget, rules: TargetRules
) -> list[Move]:
    """Pack the sequential moves into waves of up to `max_concurrent`, in order.

    A move joins the open wave when its target takes it with every claim of the wave made and
    every source of the wave still held (resources, anti-affinity and the scheduler's filters);
    otherwise the wave closes. The first move of a wave sees exactly the sequential state it was
    planned on, so it always fits.
    """
    scratch = table.copy()
    journal = Journal(scratch)
    out: list[Move] = []
    wave: list[str] = []
    number = 0

    def close() -> None:
        for iid in wave:
            journal.release_source(iid)
        for iid in wave:
            journal.finish(iid)
        wave.clear()

    for step_no, step in enumerate(steps):
        alloc = scratch.allocations[step.alloc.instance_id]
        row = scratch.index[step.target]
        joins = bool(wave) and len(wave) < budget.max_concurrent
        if joins:
            joins = (
                alloc.instance_id not in wave
                and bool((step.cell_use <= scratch.cell_free[row]).all())
                and bool((step.host_use <= scratch.host_free[row]).all())
                and anti_affinity_ok(scratch, alloc, row)
                and bool(rules.mask(scratch, alloc)[row])
            )
        if wave and not joins:
            close()
            number += 1
        try:
            journal.claim_target(alloc, step.target, step.cell_use, step.host_use)
        except ClaimError as exc:  # cannot happen: the sequential state is the planned one
            raise PlanError(step_no, f"internal: planned move no longer fits: {exc}") from None
        wave.append(alloc.instance_id)
        out.append(
            Move(
                step=step_no,
                wave=number,
                instance_id=alloc.instance_id,
                flavor=alloc.flavor,
                source=alloc.host,
                target=step.target,
                cell_use=tuple(tuple(int(x) for x in c) for c in step.cell_use),
                host_use=tuple(int(x) for x in step.host_use),
            )
        )
    close()
    return out
