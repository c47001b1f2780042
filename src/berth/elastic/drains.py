"""Which joined VMs to drain: the excess above a quota, then the long-idle surplus.

Vectorised over the VMs: candidates are sorted once by (group, idle since, name) and each group
keeps the first k of its run, k from per-group arithmetic (`controller.Counts`). A Python loop
runs only over groups above their quota (rare) and over the VMs actually drained.
"""

from __future__ import annotations

import numpy as np

from berth.elastic.actions import Code, Drain, Note, Reason
from berth.elastic.counts import Counts, Masks
from berth.elastic.state import I64, ControllerConfig, ControlState, VmTable


def _first_k(idx: I64, groups: I64, keys: list[np.ndarray], k: I64) -> I64:
    """Of VMs `idx` (with group `groups`), the first k[g] of each group in `keys` order."""
    if len(idx) == 0:
        return idx
    order = np.lexsort([idx, *keys, groups])
    g_sorted = groups[order]
    first = np.searchsorted(g_sorted, g_sorted, side="left")
    rank = np.arange(len(order)) - first
    return idx[order[rank < k[g_sorted]]]


def _idle_quota(
    c: Counts,
    state: ControlState,
    config: ControllerConfig,
    notes: list[list[Note]],
    eligible: I64,
    waiting: I64,
) -> I64:
    """How many idle VMs each group may drain, with notes for what it may not."""
    k = np.zeros(len(state.groups), dtype=np.int64)
    for g, spec in enumerate(state.groups):
        if c.excess[g] > 0 or c.need[g] > 0 or c.min_deficit[g] > 0:
            continue
        surplus = int((c.free_slots[g] - c.idle[g]) // spec.slots_per_vm)
        above_min = int(c.active[g]) - spec.min_vms
        n = int(eligible[g])
        if waiting[g] > 0 and surplus > n and above_min > n:
            text = f"idle for less than the keep-alive ({config.keep_alive:g} s)"
            notes[g].append(Note(Code.KEEP_ALIVE, text, int(min(waiting[g], surplus - n))))
        if n == 0:
            continue
        hist = state.history.get(spec.name)
        last_start = None if hist is None else hist.last_start
        if last_start is not None and state.now - last_start < config.hysteresis:
            text = f"started at {last_start:g}, within the hysteresis window"
            notes[g].append(Note(Code.HYSTERESIS, text, min(n, max(surplus, 0))))
            continue
        if above_min < min(n, surplus):
            held = min(n, surplus) - max(above_min, 0)
            notes[g].append(Note(Code.AT_MIN, f"kept at its minimum ({spec.min_vms})", held))
        k[g] = max(0, min(n, surplus, above_min))
    return k


def plan_drains(
    t: VmTable,
    m: Masks,
    c: Counts,
    state: ControlState,
    config: ControllerConfig,
    started: list[bool],
    notes: list[list[Note]],
) -> list[Drain]:
    now = state.now
    n = len(state.groups)
    gi = t.group
    idle_ref = np.where(np.isnan(t.idle_since), t.since, t.idle_since)
    free = m.serving & (t.running <= 0) & (gi >= 0)
    old = free & (now - idle_ref >= config.keep_alive)
    eligible = np.bincount(gi[old], minlength=n)
    waiting = np.bincount(gi[free & ~old], minlength=n)
    k_idle = _idle_quota(c, state, config, notes, eligible, waiting)
    for g in range(n):  # a group that starts this cycle drains nothing idle
        if started[g]:
            k_idle[g] = 0
    over: list[tuple[int, Code]] = []
    k_over = np.where(c.excess > 0, c.excess, 0).astype(np.int64)
    if k_over.any():
        serving = np.flatnonzero(m.serving & (gi >= 0))
        for i in _first_k(serving, gi[serving], [idle_ref[serving], t.running[serving]], k_over):
            over.append((int(i), Code.OVER_QUOTA))
    idle_idx = np.flatnonzero(old)
    chosen = _first_k(idle_idx, gi[idle_idx], [idle_ref[idle_idx]], k_idle)
    chosen = chosen[np.lexsort([chosen, idle_ref[chosen]])]
    picks = over + [(int(i), Code.IDLE) for i in chosen]
    kept, cut = picks[: config.max_drains], picks[config.max_drains :]
    for i, _ in cut:
        g = int(gi[i])
        text = f"at most {config.max_drains} drains per cycle"
        if notes[g] and notes[g][-1].code is Code.RATE_LIMIT:
            last = notes[g][-1]
            notes[g][-1] = Note(Code.RATE_LIMIT, text, last.vms + 1)
        else:
            notes[g].append(Note(Code.RATE_LIMIT, text, 1))
    names = state.group_names
    drains = []
    for i, code in kept:
        g = int(gi[i])
        if code is Code.OVER_QUOTA:
            reason = Reason(code, f"above its quota by {int(c.excess[g])} VMs")
        else:
            reason = Reason(code, f"idle since {idle_ref[i]:g}, no demand for it")
        drains.append(Drain(t.names[i], names[g], reason))
    return drains
