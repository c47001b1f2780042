"""The elastic pools' vocabulary: groups and quotas, queue snapshots, VMs and their states.

Pure data (no I/O, no clock): the controller decides from these, the store keeps them, the
watchers and the agent produce them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

DRAIN_GROUP = "G_none"  # the batch group a draining VM moves to: it takes no new jobs


class BatchSystem(StrEnum):
    HTCONDOR = "htcondor"
    SLURM = "slurm"


@dataclass(frozen=True)
class QueueSelector:
    """Which jobs of the batch system belong to a group.

    HTCondor: `accounting_group` (the jobs' AcctGroup) and optional extra `requirements`.
    Slurm: `partition` and/or `account`.
    """

    system: BatchSystem
    accounting_group: str | None = None
    requirements: str | None = None
    partition: str | None = None
    account: str | None = None


@dataclass(frozen=True)
class GroupSpec:
    """One science group's pool (VQuota): its bounds, its VM shape and the queue it serves."""

    name: str
    flavor: str
    cores_per_vm: int
    slots_per_vm: int  # jobs one VM runs at once
    queue: QueueSelector
    min_vms: int = 0
    max_vms: int = 0
    max_cores: int | None = None
    image: str | None = None
    share: float = 1.0  # fair-share weight when groups compete for the same room


@dataclass(frozen=True)
class GroupDemand:
    """One group's jobs as its batch system reports them at one moment.

    `idle_jobs` counts only jobs that could start if a slot appeared: jobs that are idle because
    the group's own batch quota (or an account limit) holds them back are in `held_jobs` and need
    no VM.
    """

    group: str
    idle_jobs: int = 0
    running_jobs: int = 0
    held_jobs: int = 0


@dataclass(frozen=True)
class WorkerStatus:
    """What the batch system says about the worker on one VM (by VM name)."""

    name: str
    group: str | None  # the batch group it serves now; DRAIN_GROUP when draining
    running_jobs: int
    slots: int


@dataclass(frozen=True)
class QueueSnapshot:
    taken_at: float
    groups: Mapping[str, GroupDemand] = field(default_factory=dict)
    workers: Mapping[str, WorkerStatus] = field(default_factory=dict)


class VmState(StrEnum):
    REQUESTED = "requested"  # decided; no cloud call made yet
    BOOTING = "booting"  # the cloud accepted the boot; its worker has not joined
    JOINED = "joined"  # its worker serves the group's queue
    DRAINING = "draining"  # moved to DRAIN_GROUP: finishes running jobs, takes no new ones
    RETIRED = "retired"  # deleted after draining (terminal)
    FAILED = "failed"  # never joined (boot error or deadline) (terminal)
    LOST = "lost"  # its heartbeat went stale; reaped (terminal)


TERMINAL = frozenset({VmState.RETIRED, VmState.FAILED, VmState.LOST})

# The only moves a VM record may make (docs/elastic.md, "state machine").
TRANSITIONS: Mapping[VmState, frozenset[VmState]] = {
    VmState.REQUESTED: frozenset({VmState.BOOTING, VmState.FAILED}),
    VmState.BOOTING: frozenset({VmState.JOINED, VmState.FAILED, VmState.LOST}),
    VmState.JOINED: frozenset({VmState.DRAINING, VmState.LOST}),
    VmState.DRAINING: frozenset({VmState.RETIRED, VmState.LOST, VmState.JOINED}),
    VmState.RETIRED: frozenset(),
    VmState.FAILED: frozenset(),
    VmState.LOST: frozenset(),
}


def can_move(old: VmState, new: VmState) -> bool:
    return new in TRANSITIONS[old]


@dataclass(frozen=True)
class Vm:
    """One elastic VM as Berth's record keeps it."""

    name: str
    group: str
    state: VmState
    since: float  # when it entered `state`
    requested_at: float
    cluster: str | None = None
    host: str | None = None
    heartbeat: float | None = None
    idle_since: float | None = None  # when its worker last had no running job
