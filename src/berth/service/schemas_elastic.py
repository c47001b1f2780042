"""Request and response bodies of the elastic pools' routes (docs/elastic.md, "API and CLI")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector
from berth.service.schemas import Count, Ident, _In
from berth.store.elastic_rows import CommandRow, ElasticGroupRow, StateChange, VmRow

Small = Annotated[int, Field(strict=True, ge=0, le=1_000_000)]
Positive = Annotated[int, Field(strict=True, ge=1, le=1_000_000)]
Selector = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*$")]


class QueueIn(_In):
    system: BatchSystem
    accounting_group: Selector | None = Field(None, description="HTCondor: the jobs' AcctGroup")
    requirements: Selector | None = Field(None, description="HTCondor: extra requirements")
    partition: Ident | None = Field(None, description="Slurm: the partition")
    account: Ident | None = Field(None, description="Slurm: the account")

    @model_validator(mode="after")
    def _selects(self) -> QueueIn:
        if self.system is BatchSystem.HTCONDOR and not self.accounting_group:
            raise ValueError("accounting_group: an HTCondor queue needs the jobs' AcctGroup")
        if self.system is BatchSystem.SLURM and not (self.partition or self.account):
            raise ValueError("partition: a Slurm queue needs a partition or an account")
        return self

    def to_selector(self) -> QueueSelector:
        return QueueSelector(
            self.system, self.accounting_group, self.requirements, self.partition, self.account
        )


class GroupIn(_In):
    flavor: Ident
    cores_per_vm: Positive
    slots_per_vm: Positive
    queue: QueueIn
    min_vms: Small = 0
    max_vms: Small = 0
    max_cores: Small | None = None
    image: Ident | None = None
    share: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    cluster: Ident | None = Field(None, description="only this cluster; null: any")

    @model_validator(mode="after")
    def _bounds(self) -> GroupIn:
        if self.min_vms > self.max_vms:
            raise ValueError(f"min_vms: {self.min_vms} is above max_vms ({self.max_vms})")
        return self

    def to_spec(self, name: str) -> GroupSpec:
        return GroupSpec(
            name=name,
            flavor=self.flavor,
            cores_per_vm=self.cores_per_vm,
            slots_per_vm=self.slots_per_vm,
            queue=self.queue.to_selector(),
            min_vms=self.min_vms,
            max_vms=self.max_vms,
            max_cores=self.max_cores,
            image=self.image,
            share=self.share,
        )


class GroupOut(BaseModel):
    name: str
    flavor: str
    cores_per_vm: int
    slots_per_vm: int
    queue: dict[str, Any]
    min_vms: int
    max_vms: int
    max_cores: int | None
    image: str | None
    share: float
    cluster: str | None
    vms: dict[str, int] = Field(default_factory=dict, description="live VMs by state")

    @classmethod
    def of(cls, row: ElasticGroupRow, vms: dict[str, int]) -> GroupOut:
        s = row.spec
        q = {k: v for k, v in vars(s.queue).items() if v is not None}
        q["system"] = s.queue.system.value
        return cls(
            name=s.name,
            flavor=s.flavor,
            cores_per_vm=s.cores_per_vm,
            slots_per_vm=s.slots_per_vm,
            queue=q,
            min_vms=s.min_vms,
            max_vms=s.max_vms,
            max_cores=s.max_cores,
            image=s.image,
            share=s.share,
            cluster=row.cluster,
            vms=vms,
        )


class LimitsIn(_In):
    max_vms: Count | None = None
    max_cores: Count | None = None


class LimitsOut(BaseModel):
    max_vms: int | None
    max_cores: int | None


class VmOut(BaseModel):
    name: str
    group: str
    state: str
    since: float
    requested_at: float
    cores: int
    attempt: int
    cluster: str | None
    host: str | None
    server_id: str | None
    instance_id: str | None
    heartbeat: float | None
    idle_since: float | None
    running_jobs: int
    reason: str | None

    @classmethod
    def of(cls, vm: VmRow) -> VmOut:
        data = dict(vars(vm))
        data.pop("token_id")
        data["state"] = vm.state.value
        return cls(**data)


class StateChangeOut(BaseModel):
    vm: str
    group: str
    state: str
    at: float
    cores: int
    reason: str | None

    @classmethod
    def of(cls, c: StateChange) -> StateChangeOut:
        return cls(
            vm=c.vm, group=c.group, state=c.state.value, at=c.at, cores=c.cores, reason=c.reason
        )


CommandKindIn = Literal["join", "leave", "reconfigure", "shutdown"]


class CommandIn(_In):
    kind: CommandKindIn
    args: dict[str, Selector] = Field(default_factory=dict, max_length=50)


class CommandOut(BaseModel):
    id: int
    vm: str
    kind: str
    args: dict[str, Any]
    state: str
    issued_at: float
    issued_by: str
    delivered_at: float | None
    finished_at: float | None
    result: str | None

    @classmethod
    def of(cls, c: CommandRow) -> CommandOut:
        data = dict(vars(c))
        data["kind"] = c.kind.value
        data["state"] = c.state.value
        return cls(**data)


class HeartbeatIn(_In):
    running_jobs: Count = 0


class HeartbeatOut(BaseModel):
    vm: str
    group: str
    state: str
    commands: list[CommandOut] = Field(description="open commands, oldest first (now delivered)")


class ResultIn(_In):
    ok: bool
    result: Annotated[str, Field(max_length=65536)] = ""


class HookRunOut(BaseModel):
    id: int
    vm: str
    event: str
    hook: str
    attempt: int
    outcome: str
    exit_code: int | None
    output: str
    started_at: float
    finished_at: float
    next_retry: float | None


class PowerOut(BaseModel):
    host: str
    power: str
    since: float
    reason: str
    changed_by: str
