"""Small builders for controller tests: groups, VMs, snapshots, states."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from berth.elastic.model import (
    BatchSystem,
    GroupDemand,
    GroupSpec,
    QueueSelector,
    QueueSnapshot,
    Vm,
    VmState,
    WorkerStatus,
)
from berth.elastic.state import ControlState, FailureHistory, GroupHistory


def group(
    name: str,
    *,
    min_vms: int = 0,
    max_vms: int = 100,
    max_cores: int | None = None,
    cores: int = 4,
    slots: int = 4,
    share: float = 1.0,
    flavor: str = "c4",
) -> GroupSpec:
    sel = QueueSelector(BatchSystem.HTCONDOR, accounting_group=name)
    return GroupSpec(
        name,
        flavor,
        cores,
        slots,
        sel,
        min_vms=min_vms,
        max_vms=max_vms,
        max_cores=max_cores,
        share=share,
    )


def vm(
    name: str,
    grp: str,
    state: VmState = VmState.JOINED,
    *,
    since: float = 0.0,
    requested_at: float | None = None,
    heartbeat: float | None = None,
    idle_since: float | None = None,
    cluster: str | None = "c1",
) -> Vm:
    return Vm(
        name=name,
        group=grp,
        state=state,
        since=since,
        requested_at=since if requested_at is None else requested_at,
        cluster=cluster,
        heartbeat=heartbeat,
        idle_since=idle_since,
    )


def state(
    now: float,
    groups: Sequence[GroupSpec],
    *,
    idle: Mapping[str, int] | None = None,
    vms: Sequence[Vm] = (),
    running: Mapping[str, int] | None = None,
    room: Mapping[str, Mapping[str, int]] | None = None,
    history: Mapping[str, GroupHistory] | None = None,
    clusters: Mapping[str, FailureHistory] | None = None,
    evict: frozenset[str] = frozenset(),
    global_max_vms: int | None = None,
    global_max_cores: int | None = None,
) -> ControlState:
    """A state where every joined/draining VM has a worker (slots from its group, jobs from
    `running`, default 0) and a fresh heartbeat unless the VM says otherwise."""
    specs = {g.name: g for g in groups}
    running = running or {}
    workers = {}
    fresh = []
    for v in vms:
        if v.state in (VmState.JOINED, VmState.DRAINING):
            slots = specs[v.group].slots_per_vm if v.group in specs else 1
            workers[v.name] = WorkerStatus(v.name, v.group, running.get(v.name, 0), slots)
            if v.heartbeat is None:
                v = Vm(**{**v.__dict__, "heartbeat": now})
        fresh.append(v)
    demand = {g: GroupDemand(g, idle_jobs=n) for g, n in (idle or {}).items()}
    return ControlState(
        now=now,
        groups=list(groups),
        queue=QueueSnapshot(now, demand, workers),
        vms=fresh,
        room={"c1": {"c4": 1000}} if room is None else room,
        global_max_vms=global_max_vms,
        global_max_cores=global_max_cores,
        history=history or {},
        clusters=clusters or {},
        evict=evict,
    )
