"""The simulator's shared types: the replay state periodic actions see, their protocol, and
what a replay measured.

`berth.sim.replay` runs the replay; `berth.sim.policies` and `berth.sim.defrag` describe what
runs in it, `berth.sim.report` reads its result. They import these types from here, so none
imports another for a type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from berth.core.config import SchedulerConfig
from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class PeriodicAction(Protocol):
    """Something that runs every `interval` seconds of virtual time (e.g. defragmentation)."""

    interval: float

    def __call__(self, state: ReplayState, now: float) -> int:
        """Act on the state; returns the number of events performed (counted as work)."""
        ...


@dataclass
class ReplayState:
    """What a periodic action may read (and, through `migrate`, change)."""

    table: HostTable
    scheduler: FilterScheduler
    now: float
    events: int = 0
    victims_by_host: dict[str, set[str]] = field(default_factory=dict)
    """Host -> preemptible instances running there (the evictor's candidate index)."""
    tracked: list[str] = field(default_factory=list)
    """The replay's tracked (large) flavors, e.g. a defragmenter's default target."""
    seed: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    """What periodic actions did, one record each (`action`, `time`, `migrations`, ...)."""
    pressure: int = 0
    """Requests so far that found no room although some host could hold them when empty
    (refused, or admitted by migration): what a defragmenter run `on_pressure` waits for."""
    pressure_seen: dict[str, int] = field(default_factory=dict)
    """Per periodic action name: `pressure` when it last ran."""
    hosted: dict[str, set[str]] | None = None
    """Host -> every instance running there; kept only when the policy admits by migration
    (`plan_admission` reads it instead of scanning every allocation)."""

    def moved(self, instance_id: str, source: str, target: str) -> None:
        """Keep the indexes exact after an instance moved (e.g. `apply_moves`)."""
        for index in (self.victims_by_host, self.hosted):
            held = index.get(source) if index is not None else None
            if index is not None and held is not None and instance_id in held:
                held.discard(instance_id)
                index.setdefault(target, set()).add(instance_id)

    def forget(self, instance_id: str, host: str) -> None:
        """Drop an instance from the indexes (it left `host`)."""
        for index in (self.victims_by_host, self.hosted):
            held = index.get(host) if index is not None else None
            if held is not None:
                held.discard(instance_id)

    def placed(self, instance_id: str, host: str, preemptible: bool) -> None:
        """Add a new instance to the indexes."""
        if preemptible:
            self.victims_by_host.setdefault(host, set()).add(instance_id)
        if self.hosted is not None:
            self.hosted.setdefault(host, set()).add(instance_id)

    def migrate(self, instance_id: str, host: str) -> None:
        """Move an instance to `host` (claim rule decides its cells); refused whole if it does
        not fit there."""
        alloc = self.table.release(instance_id)
        self.moved(instance_id, alloc.host, host)
        try:
            self.table.claim(
                instance_id,
                host,
                alloc.flavor,
                server_group=alloc.server_group,
                project=alloc.project,
                migratable=alloc.migratable,
            )
        except BerthError:
            self.moved(instance_id, host, alloc.host)
            self.table.claim(
                instance_id,
                alloc.host,
                alloc.flavor,
                alloc.cell_use,
                alloc.host_use,
                server_group=alloc.server_group,
                project=alloc.project,
                migratable=alloc.migratable,
            )
            raise


@dataclass
class PolicyRun:
    """Everything one replay measured (raw); `berth.sim.report` turns it into tables."""

    policy: str
    description: str
    config: SchedulerConfig
    outcome: npt.NDArray[np.int8]  # per request: 0 not replayed, ACCEPTED, REJECTED, EVICTED
    host: npt.NDArray[np.int32]  # per request: row of the host it was placed on, -1 if none
    windows: F64  # start time of each window (window 0 = warm-up)
    arrivals: I64  # (windows, business)
    accepted: I64  # (windows, business)
    evicted: I64  # (windows, business) instances evicted in that window, by their business
    failures: dict[str, dict[str, int]]  # business -> main reason code -> requests
    failure_messages: dict[str, str]  # code -> an example message
    sample_times: F64
    samples: F64  # (samples, len(SAMPLE_FIELDS))
    tracked: list[str]
    fragmentation: F64  # (samples, tracked)
    fragmentation_final: dict[str, float]  # every flavor of the trace, at the end
    latency_ns: I64  # per decision (select_destinations, incl. diagnosis on failure)
    commit_ns: int
    wall_ns: int
    events: int  # arrivals + departures that released an instance + evictions + migrations
    decisions: int
    evictions: int
    periodic_events: int
    periodic_log: list[dict[str, Any]]  # one record per periodic action run (see ReplayState)
    migrations: I64  # (windows,) instances moved by periodic actions in each window
    admission_migrations: int  # the policy's limit per request (0: admission by migration off)
    admitted: I64  # (windows,) requests that fitted nowhere, placed after live migrations
    admission_moves: I64  # (windows,) instances moved to admit requests in each window
    admission_searches: int  # `plan_admission` calls (requests that fitted nowhere)
    admission_ns: int  # time in those calls
    probes: list[dict[str, Any]]  # at the offered-load peaks: used hosts, held load, bound
    preemption: str

    @property
    def events_per_second(self) -> float:
        return self.events / (self.wall_ns / 1e9) if self.wall_ns else 0.0
