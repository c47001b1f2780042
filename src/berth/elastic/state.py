"""The controller's input: everything it decides from, as one immutable value.

`ControlState` holds the queue snapshot (jobs aggregated per group, workers by VM name), the VM
records, the group specs, the global cap, the room each cluster has now for each flavor (from
Berth's capacity counting), the failure and move history of each group and cluster, the VMs
Berth's placement marked for eviction, and `now`. `ControllerConfig` holds the tunables.

The VMs are turned once into columns (`VmTable`, numpy arrays in name order) so that a cycle
over 10,000 VMs is a handful of array operations rather than a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from berth.elastic.model import GroupSpec, QueueSnapshot, Vm, VmState, WorkerStatus

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

STATE_CODES: tuple[VmState, ...] = tuple(VmState)
STATE_INDEX: Mapping[VmState, int] = {s: i for i, s in enumerate(STATE_CODES)}


@dataclass(frozen=True)
class ControllerConfig:
    """The controller's tunables (seconds unless said otherwise)."""

    # keep-alive, hysteresis and boot deadline: the best measured in the replayed day
    # (benchmarks/results/elastic.md: 600/900 s doubled the idle VM-hours and the wait p95)
    keep_alive: float = 120.0  # a joined VM idle this long (and not needed) is drained
    hysteresis: float = 300.0  # no drain of a group within this after its last start, and back
    boot_deadline: float = 300.0  # requested/booting this long without joining: failed boot
    heartbeat_stale: float = 300.0  # a joined/draining VM silent this long is lost
    drain_deadline: float = 6 * 3600.0  # a draining VM is deleted after this even with jobs
    evict_deadline: float = 1800.0  # the same for a VM drained because placement evicts it
    backoff_base: float = 60.0  # first backoff after a failed boot, doubled per failure
    backoff_max: float = 3600.0  # the backoff's cap
    max_starts: int = 200  # VMs started per cycle, all groups
    max_starts_per_group: int = 50  # VMs started per cycle, one group
    max_drains: int = 100  # VMs drained per cycle for idleness or quota, all groups

    def __post_init__(self) -> None:
        for name in ("keep_alive", "hysteresis", "boot_deadline", "heartbeat_stale"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        for name in ("drain_deadline", "evict_deadline", "backoff_base", "backoff_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        for name in ("max_starts", "max_starts_per_group", "max_drains"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")


@dataclass(frozen=True)
class FailureHistory:
    """Consecutive failed boots (reset by a successful join) and when the last one happened."""

    failures: int = 0
    last_failure: float | None = None

    def backoff_until(self, config: ControllerConfig) -> float | None:
        """When starts may resume: last failure + base * 2^(failures-1), capped; None if none."""
        if self.failures <= 0 or self.last_failure is None:
            return None
        delay = config.backoff_base * 2.0 ** min(self.failures - 1, 62)
        return self.last_failure + min(delay, config.backoff_max)


@dataclass(frozen=True)
class GroupHistory:
    """A group's recent moves (for hysteresis) and failed boots (for backoff)."""

    last_start: float | None = None
    last_drain: float | None = None
    boots: FailureHistory = field(default_factory=FailureHistory)


@dataclass(frozen=True)
class VmTable:
    """The VM records as columns, in name order, joined with their workers' job counts."""

    names: tuple[str, ...]
    group: I64  # index into ControlState.group_names; -1 for a group with no spec
    state: I64  # index into STATE_CODES
    since: F64
    requested_at: F64
    heartbeat: F64  # NaN when none yet
    idle_since: F64  # NaN when unknown
    running: I64  # running jobs its worker reports; 0 when no worker is known
    slots: I64  # slots its worker reports; 0 when no worker is known
    cluster: tuple[str | None, ...]
    cluster_code: I64  # index into cluster_names; -1 when none
    cluster_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @staticmethod
    def build(
        vms: Sequence[Vm], workers: Mapping[str, WorkerStatus], group_index: Mapping[str, int]
    ) -> VmTable:
        """Columns from records: C-level attribute reads column by column, one array each."""
        ordered = sorted(vms, key=_NAME)
        names, groups, states, since, requested, heartbeat, idle, clusters = (
            list(map(get, ordered)) for get in _FIELDS
        )
        found = list(map(workers.get, names))
        nan = float("nan")
        f64, i64 = np.float64, np.int64
        known = sorted({c for c in clusters if c is not None})
        code = {c: i for i, c in enumerate(known)}
        code_of = code.get
        gi = group_index.get
        return VmTable(
            names=tuple(names),
            group=np.fromiter((gi(g, -1) for g in groups), dtype=i64, count=len(names)),
            state=np.fromiter(map(STATE_INDEX.__getitem__, states), dtype=i64, count=len(names)),
            since=np.array(since, dtype=f64),
            requested_at=np.array(requested, dtype=f64),
            heartbeat=np.array([nan if h is None else h for h in heartbeat], dtype=f64),
            idle_since=np.array([nan if t is None else t for t in idle], dtype=f64),
            running=np.array([0 if w is None else w.running_jobs for w in found], dtype=i64),
            slots=np.array([0 if w is None else w.slots for w in found], dtype=i64),
            cluster=tuple(clusters),
            cluster_code=np.fromiter(
                (code_of(c, -1) for c in clusters), dtype=i64, count=len(names)
            ),
            cluster_names=tuple(known),
        )


_NAME = attrgetter("name")
_FIELDS = tuple(
    attrgetter(a)
    for a in (
        "name",
        "group",
        "state",
        "since",
        "requested_at",
        "heartbeat",
        "idle_since",
        "cluster",
    )
)


@dataclass(frozen=True)
class ControlState:
    """Everything one cycle decides from. `now` is the only clock the controller reads."""

    now: float
    groups: Sequence[GroupSpec]
    queue: QueueSnapshot
    vms: Sequence[Vm]
    room: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # cluster -> flavor -> VMs
    global_max_vms: int | None = None
    global_max_cores: int | None = None
    history: Mapping[str, GroupHistory] = field(default_factory=dict)  # by group
    clusters: Mapping[str, FailureHistory] = field(default_factory=dict)  # by cluster
    evict: frozenset[str] = frozenset()  # VM names placement marked for eviction
    table: VmTable | None = None  # the VMs as columns, when the caller built them already

    def __post_init__(self) -> None:
        if not math.isfinite(self.now):
            raise ValueError("now: must be a finite number of seconds")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError("groups: a group name is listed twice")
        for g in self.groups:
            if g.cores_per_vm <= 0 or g.slots_per_vm <= 0:
                raise ValueError(f"groups[{g.name}]: cores_per_vm and slots_per_vm must be > 0")
            if g.min_vms < 0 or g.max_vms < 0 or g.min_vms > g.max_vms:
                raise ValueError(f"groups[{g.name}]: need 0 <= min_vms <= max_vms")
            if g.share <= 0:
                raise ValueError(f"groups[{g.name}]: share must be > 0")
        for cap in ("global_max_vms", "global_max_cores"):
            value = getattr(self, cap)
            if value is not None and value < 0:
                raise ValueError(f"{cap}: must be >= 0")

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    def vm_table(self) -> VmTable:
        if self.table is not None:
            return self.table
        index = {g.name: i for i, g in enumerate(self.groups)}
        return VmTable.build(self.vms, self.queue.workers, index)
