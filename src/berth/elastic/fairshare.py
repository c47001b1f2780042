"""Who gets the room: weighted fair shares of the VMs a cycle may start.

Each group asks for up to `cap[g]` VMs (its demand or minimum, already cut to its own quota, rate
limit and backoff). The groups then share what is common: the room for each flavor, the global
VM and core caps, the per-cycle start limit. Minimums come first (the group furthest below its
minimum, relatively, gets the next VM); the rest is handed out one VM at a time to the group
whose cores (held plus given) per unit of `share` are lowest — weighted max-min fairness in cores.
Ties go to the group listed first. The loop runs once per VM started, so its cost is bounded by
the start limit, not by the fleet.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from berth.elastic.actions import Code


@dataclass
class Pool:
    """What all groups share this cycle (mutated as VMs are handed out)."""

    room: dict[str, int]  # flavor -> VMs that fit in the clusters that may be used
    vms_left: int  # global VM cap minus VMs held; a large number when uncapped
    cores_left: int  # likewise for cores
    starts_left: int  # the per-cycle start limit


@dataclass(frozen=True)
class Ask:
    cap: int  # VMs this group may take at most
    min_deficit: int  # of which this many bring it up to its minimum
    held_cores: int  # cores it holds now (requested + booting + joined)
    cores_per_vm: int
    share: float
    flavor: str


def _blocker(ask: Ask, pool: Pool) -> Code | None:
    """Why the pool cannot give this group one more VM, or None when it can."""
    if pool.starts_left <= 0:
        return Code.RATE_LIMIT
    if pool.vms_left <= 0 or pool.cores_left < ask.cores_per_vm:
        return Code.GLOBAL_CAP
    if pool.room.get(ask.flavor, 0) <= 0:
        return Code.NO_ROOM
    return None


def _take(ask: Ask, pool: Pool) -> None:
    pool.starts_left -= 1
    pool.vms_left -= 1
    pool.cores_left -= ask.cores_per_vm
    pool.room[ask.flavor] -= 1


def allocate(asks: Sequence[Ask], pool: Pool) -> tuple[list[int], list[Code | None]]:
    """VMs given to each group, and for each group short of its cap the rule that stopped it."""
    given = [0] * len(asks)
    stopped: list[Code | None] = [None] * len(asks)
    # 1. minimums: relatively furthest below first
    heap = [(0.0, i) for i, a in enumerate(asks) if a.min_deficit > 0 and a.cap > 0]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        a = asks[i]
        code = _blocker(a, pool)
        if code is not None:
            stopped[i] = code
            continue
        _take(a, pool)
        given[i] += 1
        if given[i] < min(a.min_deficit, a.cap):
            heapq.heappush(heap, (given[i] / a.min_deficit, i))
    # 2. the rest by weighted cores
    heap = [
        ((a.held_cores + given[i] * a.cores_per_vm) / a.share, i)
        for i, a in enumerate(asks)
        if given[i] < a.cap and stopped[i] is None
    ]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        a = asks[i]
        code = _blocker(a, pool)
        if code is not None:
            stopped[i] = code
            continue
        _take(a, pool)
        given[i] += 1
        if given[i] < a.cap:
            heapq.heappush(heap, ((a.held_cores + given[i] * a.cores_per_vm) / a.share, i))
    return given, stopped
