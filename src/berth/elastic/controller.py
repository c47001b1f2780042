"""The elastic controller: one pure decision per cycle, `decide(state, config) -> Decision`.

No I/O and no clock: the loop at the edge builds a `ControlState` (queue snapshot, VM records,
room, history, `now`), calls `decide`, carries the actions out and folds them into the history
with `advance_history`. The rules, in the order they run (docs/elastic.md, "controller"):

1. **Reap.** A VM requested or booting for longer than `boot_deadline` is a failed boot (FAILED);
   a joined or draining VM whose heartbeat is older than `heartbeat_stale` is LOST.
2. **Evict.** A joined VM that Berth's placement marked for eviction (an on-demand user needs the
   room), or whose group has no spec any more, is drained at once — no limit, no hysteresis.
3. **Retire.** A draining VM whose worker runs no job is deleted; one still running jobs past its
   deadline (`evict_deadline` for evictions, `drain_deadline` otherwise) is deleted by force.
4. **Want.** Per group: idle jobs (held jobs are not demand) beyond the free slots (joined
   workers' free slots plus `slots_per_vm` for each VM still booting) need
   ceil(excess / slots_per_vm) VMs; a group below `min_vms` wants the difference; either is cut
   to the group's `max_vms`/`max_cores` headroom, its per-cycle start limit, and to nothing
   during its boot backoff or within `hysteresis` of its last drain.
5. **Share.** What is common — room per flavor in the clusters not backing off, the global VM
   and core caps, the per-cycle start limit — goes first to minimums, then by weighted fair
   shares in cores (`fairshare`).
6. **Drain.** A group above its quota drains the excess (fewest running jobs first). A group
   that wants nothing drains joined VMs idle for at least `keep_alive`, oldest idle first, as
   long as the remaining free slots still cover its idle jobs, never below `min_vms`, never
   within `hysteresis` of its last start; at most `max_drains` per cycle.

Every action carries its reason; every group's report carries a note for each rule that held
something back. Deterministic: the same state gives the same decision.
"""

from __future__ import annotations

import numpy as np

from berth.elastic.actions import (
    Action,
    Code,
    Decision,
    Drain,
    GroupReport,
    Note,
    Reap,
    Reason,
    Retire,
    Start,
)
from berth.elastic.counts import Counts, Masks, group_counts, vm_masks
from berth.elastic.drains import plan_drains
from berth.elastic.fairshare import Ask, Pool, allocate
from berth.elastic.history import effective_backoff
from berth.elastic.model import VmState
from berth.elastic.state import (
    STATE_INDEX,
    ControllerConfig,
    ControlState,
    VmTable,
)

_REQ = STATE_INDEX[VmState.REQUESTED]
_BOOT = STATE_INDEX[VmState.BOOTING]
_JOIN = STATE_INDEX[VmState.JOINED]
_DRAIN = STATE_INDEX[VmState.DRAINING]
_BIG = 1 << 60


_BOOT_LATE = Reason(Code.BOOT_DEADLINE, "did not join within the boot deadline")
_SILENT = Reason(Code.HEARTBEAT_STALE, "no heartbeat within the stale limit")
_EVICT = Reason(Code.EVICTED, "marked for eviction")
_ORPHAN = Reason(Code.UNKNOWN_GROUP, "its group has no spec")
_EMPTY = Reason(Code.DRAINED, "drained: no running job")


def _reaps_and_retires(t: VmTable, m: Masks, state: ControlState) -> list[Action]:
    names = state.group_names
    groups = [names[g] if g >= 0 else "" for g in t.group.tolist()]
    unknown = np.flatnonzero(m.unknown).tolist()
    if unknown:
        recorded = {v.name: v.group for v in state.vms}
        for i in unknown:
            groups[i] = recorded.get(t.names[i], "")
    tn, cl = t.names, t.cluster
    failed, lost = VmState.FAILED, VmState.LOST
    actions: list[Action] = [
        Reap(tn[i], groups[i], failed, cl[i], _BOOT_LATE) for i in np.flatnonzero(m.failed).tolist()
    ]
    actions += [
        Reap(tn[i], groups[i], lost, cl[i], _SILENT) for i in np.flatnonzero(m.lost).tolist()
    ]
    actions += [
        Drain(tn[i], groups[i], _EVICT if m.evicted[i] else _ORPHAN)
        for i in np.flatnonzero(m.leave).tolist()
    ]
    actions += [Retire(tn[i], groups[i], False, _EMPTY) for i in np.flatnonzero(m.retire).tolist()]
    for i in np.flatnonzero(m.force).tolist():
        reason = Reason(Code.DRAIN_DEADLINE, f"still {int(t.running[i])} jobs at its deadline")
        actions.append(Retire(tn[i], groups[i], True, reason))
    return actions


def _pool(t: VmTable, m: Masks, state: ControlState, config: ControllerConfig) -> Pool:
    gone = m.failed | m.lost  # reaped: deleted now; a retiring VM is deleted only later
    held = (t.state == _REQ) | (t.state == _BOOT) | (t.state == _JOIN) | (t.state == _DRAIN)
    held &= ~gone
    cpv = np.array([0] + [g.cores_per_vm for g in state.groups], dtype=np.int64)
    held_cores = int(cpv[t.group[held] + 1].sum())
    vms_cap = _BIG if state.global_max_vms is None else state.global_max_vms
    cores_cap = _BIG if state.global_max_cores is None else state.global_max_cores
    return Pool(
        room={},
        vms_left=vms_cap - int(held.sum()),
        cores_left=cores_cap - held_cores,
        starts_left=config.max_starts,
    )


def _room(state: ControlState, open_clusters: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Room per flavor in open clusters, and in every cluster (to tell backoff from no room)."""
    usable: dict[str, int] = {}
    anywhere: dict[str, int] = {}
    for cluster, flavors in state.room.items():
        for flavor, n in flavors.items():
            anywhere[flavor] = anywhere.get(flavor, 0) + max(n, 0)
            if cluster in open_clusters:
                usable[flavor] = usable.get(flavor, 0) + max(n, 0)
    return usable, anywhere


def decide(state: ControlState, config: ControllerConfig) -> Decision:
    """One control cycle: the actions to carry out now, with a reason each, and group notes."""
    t = state.vm_table()
    m = vm_masks(t, state, config)
    c = group_counts(t, m, state)
    actions = _reaps_and_retires(t, m, state)
    group_back, open_clusters = effective_backoff(state, config, t, m.failed)
    pool = _pool(t, m, state, config)
    pool.room, room_anywhere = _room(state, open_clusters)
    notes: list[list[Note]] = [[] for _ in state.groups]
    asks = _asks(state, config, c, group_back, notes)
    usable = dict(pool.room)
    given, stopped = allocate(asks, pool)
    for g, spec in enumerate(state.groups):
        if given[g] > 0:
            clusters = tuple(
                sorted(cl for cl in open_clusters if state.room[cl].get(spec.flavor, 0) > 0)
            )
            actions.append(Start(spec.name, given[g], spec.flavor, clusters, _start_reason(c, g)))
        short = asks[g].cap - given[g]
        code = stopped[g]
        if short > 0 and code is not None:
            if code is Code.NO_ROOM and usable.get(spec.flavor, 0) > 0:
                code = Code.FAIR_SHARE
            elif code is Code.NO_ROOM and room_anywhere.get(spec.flavor, 0) > 0:
                code = Code.CLUSTER_BACKOFF
            text = _stop_text(code, spec.flavor, usable.get(spec.flavor, 0))
            notes[g].append(Note(code, text, short))
    drains = plan_drains(t, m, c, state, config, [n > 0 for n in given], notes)
    actions.extend(drains)
    drained = np.zeros(len(state.groups), dtype=np.int64)
    index = {name: i for i, name in enumerate(state.group_names)}
    for d in drains:
        drained[index[d.group]] += 1
    reports = tuple(
        GroupReport(
            group=spec.name,
            idle_jobs=int(c.idle[g]),
            free_slots=int(c.free_slots[g]),
            active_vms=int(c.active[g]),
            draining_vms=int(c.draining[g]),
            wanted=int(max(c.need[g], c.min_deficit[g])),
            started=given[g],
            drained=int(drained[g]),
            notes=tuple(notes[g]),
        )
        for g, spec in enumerate(state.groups)
    )
    return Decision(now=state.now, actions=tuple(actions), groups=reports)


def _asks(
    state: ControlState,
    config: ControllerConfig,
    c: Counts,
    group_back: list[float | None],
    notes: list[list[Note]],
) -> list[Ask]:
    asks: list[Ask] = []
    for g, spec in enumerate(state.groups):
        want = int(max(c.need[g], c.min_deficit[g]))
        cap = min(want, int(c.headroom[g]))
        if want > cap:
            text = f"at its quota (max_vms {spec.max_vms})"
            if c.held_draining[g]:
                text += f", counting its {int(c.held_draining[g])} draining VMs"
            notes[g].append(Note(Code.AT_MAX, text, want - cap))
        hist = state.history.get(spec.name)
        until = group_back[g]
        if cap > 0 and until is not None:
            text = f"failed boots: backing off until {until:g}"
            notes[g].append(Note(Code.GROUP_BACKOFF, text, cap))
            cap = 0
        last_drain = None if hist is None else hist.last_drain
        if cap > 0 and last_drain is not None and state.now - last_drain < config.hysteresis:
            text = f"drained at {last_drain:g}, within the hysteresis window"
            notes[g].append(Note(Code.HYSTERESIS, text, cap))
            cap = 0
        if cap > config.max_starts_per_group:
            text = f"at most {config.max_starts_per_group} starts per group per cycle"
            notes[g].append(Note(Code.RATE_LIMIT, text, cap - config.max_starts_per_group))
            cap = config.max_starts_per_group
        asks.append(
            Ask(
                cap=cap,
                min_deficit=min(int(c.min_deficit[g]), cap),
                held_cores=int(c.active[g]) * spec.cores_per_vm,
                cores_per_vm=spec.cores_per_vm,
                share=spec.share,
                flavor=spec.flavor,
            )
        )
    return asks


def _start_reason(c: Counts, g: int) -> Reason:
    if c.need[g] >= c.min_deficit[g]:
        text = f"{int(c.idle[g])} idle jobs, {int(c.free_slots[g])} free slots"
        return Reason(Code.DEMAND, text)
    return Reason(Code.MIN_VMS, f"{int(c.active[g])} VMs, below its minimum")


def _stop_text(code: Code, flavor: str, room: int) -> str:
    if code is Code.FAIR_SHARE:
        return f"the room for {room} VMs of {flavor} was shared by weight with other groups"
    if code is Code.NO_ROOM:
        return f"no room for {flavor}"
    if code is Code.CLUSTER_BACKOFF:
        return f"room for {flavor} only in clusters backing off after failed boots"
    if code is Code.GLOBAL_CAP:
        return "the pool's global cap is reached"
    return "the per-cycle start limit is reached"
