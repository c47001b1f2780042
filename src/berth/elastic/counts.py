"""Per-VM masks and per-group counts of one cycle: the arithmetic the controller's rules share.

All vectorised over the `VmTable` (numpy), one bincount per per-group column.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from berth.elastic.model import VmState
from berth.elastic.state import I64, STATE_INDEX, Bool, ControllerConfig, ControlState, VmTable

_REQ = STATE_INDEX[VmState.REQUESTED]
_BOOT = STATE_INDEX[VmState.BOOTING]
_JOIN = STATE_INDEX[VmState.JOINED]
_DRAIN = STATE_INDEX[VmState.DRAINING]
_BIG = 1 << 60


@dataclass(frozen=True)
class Masks:
    """Per-VM facts of this cycle (boolean columns over the `VmTable`)."""

    failed: Bool  # reaped: never joined in time
    lost: Bool  # reaped: heartbeat stale
    evicted: Bool  # marked for eviction by placement
    unknown: Bool  # its group has no spec
    leave: Bool  # joined, drained now because evicted or unknown
    retire: Bool  # draining, deleted now (jobs done)
    force: Bool  # draining, deleted now (deadline)
    pending: Bool  # requested or booting, still in time
    serving: Bool  # joined, healthy, staying


def _name_mask(names: tuple[str, ...], chosen: frozenset[str]) -> Bool:
    mask = np.zeros(len(names), dtype=bool)
    for name in chosen:
        i = bisect.bisect_left(names, name)
        if i < len(names) and names[i] == name:
            mask[i] = True
    return mask


def vm_masks(t: VmTable, state: ControlState, config: ControllerConfig) -> Masks:
    now = state.now
    st = t.state
    pending = (st == _REQ) | (st == _BOOT)
    joined = st == _JOIN
    draining = st == _DRAIN
    failed = pending & (now - t.requested_at > config.boot_deadline)
    seen = np.where(np.isnan(t.heartbeat), t.since, t.heartbeat)
    lost = (joined | draining) & (now - seen > config.heartbeat_stale)
    evicted = _name_mask(t.names, state.evict)
    unknown = t.group < 0
    leave = joined & ~lost & (evicted | unknown)
    staying_drain = draining & ~lost
    done = staying_drain & (t.running <= 0)
    deadline = np.where(evicted, config.evict_deadline, config.drain_deadline)
    force = staying_drain & ~done & (now - t.since > deadline)
    return Masks(
        failed=failed,
        lost=lost,
        evicted=evicted,
        unknown=unknown,
        leave=leave,
        retire=done,
        force=force,
        pending=pending & ~failed & ~unknown,
        serving=joined & ~lost & ~leave,
    )


@dataclass(frozen=True)
class Counts:
    """Per-group columns (index = position in `state.groups`)."""

    active: I64  # pending + serving VMs
    pending: I64
    draining: I64  # draining and not retired this cycle
    held_draining: I64  # draining VMs the cloud still holds (retiring ones too: deleted later)
    free_slots: I64
    idle: I64
    need: I64  # VMs demand asks for
    min_deficit: I64
    headroom: I64  # VMs its own quota still allows (0 when above it)
    excess: I64  # VMs above its own quota
    failed: I64  # failed boots reaped this cycle


def group_counts(t: VmTable, m: Masks, state: ControlState) -> Counts:
    n = len(state.groups)
    gi = t.group
    ok = gi >= 0

    def count(mask: Bool) -> I64:
        return np.bincount(gi[mask & ok], minlength=n).astype(np.int64)

    cpv = np.array([g.cores_per_vm for g in state.groups], dtype=np.int64)
    spv = np.array([g.slots_per_vm for g in state.groups], dtype=np.int64)
    lo = np.array([g.min_vms for g in state.groups], dtype=np.int64)
    hi = np.array([g.max_vms for g in state.groups], dtype=np.int64)
    hi_cores = np.array(
        [_BIG if g.max_cores is None else g.max_cores for g in state.groups], dtype=np.int64
    )
    demand = state.queue.groups
    idle = np.array(
        [max(demand[g.name].idle_jobs, 0) if g.name in demand else 0 for g in state.groups],
        dtype=np.int64,
    )
    pending = count(m.pending)
    serving = m.serving & ok
    free = np.maximum(t.slots - t.running, 0)
    free_joined = np.bincount(gi[serving], weights=free[serving], minlength=n).astype(np.int64)
    active = pending + count(m.serving)
    free_slots = free_joined + pending * spv
    need = -(-np.maximum(idle - free_slots, 0) // spv)
    cores = active * cpv
    # A draining VM still holds its room until its server is deleted (a retire waits for the
    # agent's shutdown), so it counts against the quota: a group at its maximum starts no
    # replacement while its old VMs drain. The excess to drain counts only active VMs.
    held = count((t.state == _DRAIN) & ~m.lost) + count(m.leave)
    room_vms = np.minimum(hi - active - held, (hi_cores - (active + held) * cpv) // cpv)
    over_cores = -(-np.maximum(cores - hi_cores, 0) // cpv)
    draining = count((t.state == _DRAIN) & ~m.lost & ~m.retire & ~m.force) + count(m.leave)
    return Counts(
        active=active,
        pending=pending,
        draining=draining,
        held_draining=held,
        free_slots=free_slots,
        idle=idle,
        need=need,
        min_deficit=np.maximum(lo - active, 0),
        headroom=np.maximum(room_vms, 0),
        excess=np.maximum(np.maximum(active - hi, 0), over_cores),
        failed=count(m.failed),
    )
