"""Elastic pools' rows as records, their errors, and the converters from result rows
(`berth.store.elastic_groups`, `elastic_vms`, `elastic_commands`, `elastic_hooks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth.elastic.commands import CommandKind, CommandState
from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector, Vm, VmState
from berth.store.errors import StoreError


class VmStateError(StoreError):
    """A VM record may not make that move (`berth.elastic.model.TRANSITIONS`); nothing written."""

    code = "vm_state"

    def __init__(self, vm: str, old: str, new: str, allowed: list[str]) -> None:
        can = ", ".join(allowed) or "nothing (terminal)"
        super().__init__(f"vm {vm!r} is {old}; it cannot become {new} (from {old}: {can})")
        self.vm = vm
        self.old = old
        self.new = new


class CommandStateError(StoreError):
    """A command may not make that move (`berth.elastic.commands.COMMAND_MOVES`)."""

    code = "command_state"


@dataclass(frozen=True)
class ElasticGroupRow:
    spec: GroupSpec
    cluster: str | None = None  # None: wherever Berth places
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class ElasticLimits:
    """The global cap over every group (None: none)."""

    max_vms: int | None = None
    max_cores: int | None = None


@dataclass(frozen=True)
class VmRow:
    name: str
    group: str
    state: VmState
    since: float
    requested_at: float
    cores: int
    attempt: int = 1
    cluster: str | None = None
    host: str | None = None
    server_id: str | None = None
    instance_id: str | None = None
    heartbeat: float | None = None
    idle_since: float | None = None
    running_jobs: int = 0
    token_id: str | None = None
    reason: str | None = None

    def to_vm(self) -> Vm:
        return Vm(
            name=self.name,
            group=self.group,
            state=self.state,
            since=self.since,
            requested_at=self.requested_at,
            cluster=self.cluster,
            host=self.host,
            heartbeat=self.heartbeat,
            idle_since=self.idle_since,
        )


@dataclass(frozen=True)
class StateChange:
    """One entry of the state history: `vm` entered `state` at `at` (accounting reads these)."""

    id: int
    vm: str
    group: str
    state: VmState
    at: float
    cores: int
    reason: str | None = None


@dataclass(frozen=True)
class CommandRow:
    id: int
    vm: str
    kind: CommandKind
    args: dict[str, Any]
    state: CommandState
    issued_at: float
    issued_by: str
    delivered_at: float | None = None
    finished_at: float | None = None
    result: str | None = None


@dataclass(frozen=True)
class HookRun:
    vm: str
    event: str  # join or leave
    hook: str
    attempt: int
    outcome: str  # ok or failed
    started_at: float
    finished_at: float
    exit_code: int | None = None
    output: str = ""
    next_retry: float | None = None
    id: int = 0


@dataclass(frozen=True)
class HostPowerRow:
    host: str
    power: str  # on or off
    since: float
    reason: str = ""
    changed_by: str = ""


def queue_json(q: QueueSelector) -> dict[str, Any]:
    out: dict[str, Any] = {"system": q.system.value}
    for key in ("accounting_group", "requirements", "partition", "account"):
        if getattr(q, key) is not None:
            out[key] = getattr(q, key)
    return out


def queue_of(data: dict[str, Any]) -> QueueSelector:
    return QueueSelector(
        system=BatchSystem(data["system"]),
        accounting_group=data.get("accounting_group"),
        requirements=data.get("requirements"),
        partition=data.get("partition"),
        account=data.get("account"),
    )


def group_record(r: Any) -> ElasticGroupRow:
    spec = GroupSpec(
        name=r.name,
        flavor=r.flavor,
        cores_per_vm=int(r.cores_per_vm),
        slots_per_vm=int(r.slots_per_vm),
        queue=queue_of(dict(r.queue)),
        min_vms=int(r.min_vms),
        max_vms=int(r.max_vms),
        max_cores=None if r.max_cores is None else int(r.max_cores),
        image=r.image,
        share=float(r.share),
    )
    return ElasticGroupRow(spec, r.cluster, float(r.created_at), float(r.updated_at))


def vm_record(r: Any) -> VmRow:
    return VmRow(
        name=r.name,
        group=r.group,
        state=VmState(r.state),
        since=float(r.since),
        requested_at=float(r.requested_at),
        cores=int(r.cores),
        attempt=int(r.attempt),
        cluster=r.cluster,
        host=r.host,
        server_id=r.server_id,
        instance_id=r.instance_id,
        heartbeat=r.heartbeat,
        idle_since=r.idle_since,
        running_jobs=int(r.running_jobs),
        token_id=r.token_id,
        reason=r.reason,
    )


def change_record(r: Any) -> StateChange:
    return StateChange(
        int(r.id), r.vm, r.group, VmState(r.state), float(r.at), int(r.cores), r.reason
    )


def command_record(r: Any) -> CommandRow:
    return CommandRow(
        id=int(r.id),
        vm=r.vm,
        kind=CommandKind(r.kind),
        args=dict(r.args or {}),
        state=CommandState(r.state),
        issued_at=float(r.issued_at),
        issued_by=r.issued_by,
        delivered_at=r.delivered_at,
        finished_at=r.finished_at,
        result=r.result,
    )


def hook_record(r: Any) -> HookRun:
    return HookRun(
        vm=r.vm,
        event=r.event,
        hook=r.hook,
        attempt=int(r.attempt),
        outcome=r.outcome,
        started_at=float(r.started_at),
        finished_at=float(r.finished_at),
        exit_code=r.exit_code,
        output=r.output,
        next_retry=r.next_retry,
        id=int(r.id),
    )


@dataclass(frozen=True)
class BackoffRow:
    """One group's or cluster's remembered history (`kind` group or cluster): the hysteresis
    clock (groups only) and the consecutive failed boots with the last one's time."""

    kind: str
    name: str
    last_start: float | None = None
    last_drain: float | None = None
    failures: int = 0
    last_failure: float | None = None
