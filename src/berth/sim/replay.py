"""The discrete-event replay: a trace against a fleet, one policy at a time, on the real core.

Pure: a virtual clock (the trace's times), randomness only from the seed, no I/O. The only
wall-clock reads are the injectable `clock` used to time decisions (latency and events/s), which
never influences a decision.

Events, in time order (at equal times departures first, then arrivals, each by trace order):

* **arrival**: `FilterScheduler.select_destinations` then `engine.commit` for one instance; on
  `NoValidHost` the diagnosis' main reason is counted; then, when the policy admits by migration
  (`Policy.admission_migrations`), `berth.core.defrag.admit.plan_admission` may move up to that
  many instances so that the request fits on one host (tried before any eviction: a migration
  kills nothing); failing that, for a regular (non-preemptible) request, the evictor (when there
  is one) may return preemptible victims to release before committing its decision.
* **departure**: `HostTable.release` (skipped for requests that were rejected or evicted).
* **sample** every `sample_every` seconds from the window start: utilisation, empty hosts,
  stranded resources, fragmentation per tracked flavor (`berth.sim.measures`).
* **periodic actions** (optional, e.g. a defragmenter) run at their own interval with access to
  the replay state.

Because every event is known in advance (the trace gives each VM's start and end), the event
list is one sorted array, not a heap; evictions happen inside the arrival that causes them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from berth.core import jit
from berth.core.config import SchedulerConfig
from berth.core.defrag import apply_moves
from berth.core.defrag.admit import plan_admission
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.errors import BerthError
from berth.core.explain import NoValidHost
from berth.core.model import Fleet
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.sim.bound import Bound, flavor_vectors, lower_bound
from berth.sim.evictions import Evictor, Victims
from berth.sim.fleets import merge_trace
from berth.sim.measures import (
    cpu_capacity,
    eligible_hosts,
    fragmentation_rate,
    memory_capacity,
    snapshot,
)
from berth.sim.policies import Policy, lean_config
from berth.sim.trace import BUSINESS_LABELS, Business, Trace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

ACCEPTED = 1
REJECTED = 2
EVICTED = 3  # accepted, later evicted

SAMPLE_FIELDS = (
    "used_hosts",
    "empty_hosts",
    "cpu_util_used",
    "mem_util_used",
    "cpu_util",
    "mem_util",
    "stranded_cpu",
    "stranded_mem",
)


class PeriodicAction(Protocol):
    """Something that runs every `interval` seconds of virtual time (e.g. defragmentation)."""

    interval: float

    def __call__(self, state: ReplayState, now: float) -> int:
        """Act on the state; returns the number of events performed (counted as work)."""
        ...


@dataclass
class ReplayOptions:
    seed: int = 0
    sample_every: float | None = None
    """Seconds between samples; default: the trace's window / 12."""
    track_flavors: Sequence[str] | None = None
    """Flavors whose fragmentation rate is sampled; default: `large_flavors(trace)`."""
    full_fraction: float = 0.05
    evictor: Evictor | None = None
    periodic: Sequence[PeriodicAction] = ()
    progress: Callable[[int, int], None] | None = None
    """Called as progress(events done, events total) every `progress_every` events."""
    progress_every: int = 2048
    clock: Callable[[], int] = time.perf_counter_ns
    bound: bool = True
    bound_time_limit: float = 10.0
    fast: bool = True
    """Decide and claim in one call (`FilterScheduler.place_one`); False = the general path,
    `select_destinations` then `commit`. Both give the same placements (tested); the fast one
    skips the decision object and its alternates."""
    warmup: Policy | None = None
    """Policy that places the VMs already running when the window opens (start before
    `window_start`); None = the policy under test. A common warm-up policy starts every policy
    from the same fleet state, so in-window results compare placement alone."""


def large_flavors(
    trace: Trace,
    k: int = 4,
    min_share: float = 0.005,
    sizes: Mapping[str, tuple[int, int]] | None = None,
) -> list[str]:
    """The `k` largest flavors by vCPUs (then memory) among those with at least `min_share` of
    the requests (rare giants say little about a fleet), largest first. `sizes` gives
    (vcpus, memory_mb) for flavors the trace does not define itself (from the fleet file)."""
    counts = np.bincount(trace.flavor, minlength=len(trace.flavor_names))
    total = max(1, int(counts.sum()))
    known = {n: (f.vcpus, f.memory_mb) for n, f in trace.flavors.items()}
    known.update(sizes or {})
    sized: list[tuple[int, int, str]] = []
    for name, c in zip(trace.flavor_names, counts, strict=True):
        if name in known and c / total >= min_share:
            sized.append((*known[name], name))
    sized.sort(reverse=True)
    return [name for _, _, name in sized[:k]]


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


@dataclass
class Probe:
    event: int  # index into the sorted event list, probed after it is processed
    label: str
    offered: dict[str, int] = field(default_factory=dict)
    bound: Bound | None = None


class Simulation:
    """A trace prepared against a fleet; `run(policy)` replays it under one policy."""

    def __init__(self, trace: Trace, fleet: Fleet, options: ReplayOptions | None = None) -> None:
        self.trace = trace
        self.options = options or ReplayOptions()
        jit.prepare()  # compiled once, here: a replay's timings never include it
        self.fleet = merge_trace(fleet, trace)
        self.base = HostTable.from_fleet(self.fleet)
        self.now = float(fleet.now) if fleet.now is not None else 0.0
        self.flavors_used = [trace.flavor_names[i] for i in np.unique(trace.flavor)]
        for name in trace.flavor_names:
            self.base.demand(name)
        self.zoned = bool((trace.zone >= 0).any())
        sizes = {n: (s.vcpus, s.memory_mb) for n, s in self.base.flavors.items()}
        self.tracked = list(self.options.track_flavors or large_flavors(trace, sizes=sizes))
        for name in self.tracked:
            self.base.demand(name)
        self.eligible = {f: eligible_hosts(self.base, f, self.now) for f in trace.flavor_names}
        self.cpu_cap = cpu_capacity(self.base)
        self.mem_cap = memory_capacity(self.base)
        self.preexisting: dict[str, int] = {}
        for inst in self.fleet.instances:
            self.preexisting[inst.flavor] = self.preexisting.get(inst.flavor, 0) + 1
        self._events()
        self.sample_every = self.options.sample_every or trace.window / 12
        self.probes = self._probes()

    # ------------------------------------------------------------------ preparation
    def _events(self) -> None:
        tr = self.trace
        n = len(tr)
        horizon = tr.horizon
        arrive = np.flatnonzero(tr.start <= horizon)
        depart = arrive[tr.end[arrive] <= horizon]
        times = np.concatenate([tr.start[arrive], tr.end[depart]])
        kinds = np.concatenate(
            [np.ones(arrive.size, dtype=np.int8), np.zeros(depart.size, dtype=np.int8)]
        )
        idx = np.concatenate([arrive, depart]).astype(np.int64)
        order = np.lexsort((idx, kinds, times))
        self.ev_time = times[order]
        self.ev_kind = kinds[order]
        self.ev_idx = idx[order]
        self.n_requests = n
        ws, w = tr.window_start, tr.window
        last = max(float(horizon if math.isfinite(horizon) else tr.start.max()), ws)
        self.n_windows = max(1, math.ceil((last - ws) / w)) + 1
        self.window_starts = np.concatenate([[-math.inf], ws + w * np.arange(self.n_windows - 1)])

    def _offered(self, k: int) -> dict[str, int]:
        """Flavor counts of what would be running after event k if every request were accepted."""
        arrived = np.zeros(self.n_requests, dtype=bool)
        kinds, idx = self.ev_kind[: k + 1], self.ev_idx[: k + 1]
        arrived[idx[kinds == 1]] = True
        arrived[idx[kinds == 0]] = False
        counts = np.bincount(self.trace.flavor[arrived], minlength=len(self.trace.flavor_names))
        out = {f: int(c) for f, c in zip(self.trace.flavor_names, counts, strict=True) if c}
        for f, c in self.preexisting.items():
            out[f] = out.get(f, 0) + c
        return out

    def _probes(self) -> list[Probe]:
        """Instants of peak offered load: the events after which offered CPU (shared + pinned)
        and offered memory (small + huge pages) are highest."""
        tr = self.trace
        if self.ev_time.size == 0:
            return []
        vec = flavor_vectors(self.base, tr.flavor_names)  # (flavors, resources)
        both = np.stack([vec[:, 0] + vec[:, 1], vec[:, 2] + vec[:, 3]], axis=1)
        sign = np.where(self.ev_kind == 1, 1.0, -1.0)
        level = np.cumsum(both[tr.flavor[self.ev_idx]] * sign[:, None], axis=0)
        probes: dict[int, list[str]] = {}
        for r, name in enumerate(("CPU", "memory")):
            if both[:, r].any():
                probes.setdefault(int(np.argmax(level[:, r])), []).append(name)
        out: list[Probe] = []
        for k in sorted(probes):
            label = "peak " + " and ".join(probes[k])
            p = Probe(event=k, label=label, offered=self._offered(k))
            if self.options.bound:
                p.bound = lower_bound(
                    self.base, p.offered, time_limit=self.options.bound_time_limit
                )
            out.append(p)
        return out

    @property
    def lp_useful(self) -> bool:
        """Whether the LP beat the simple bounds on the offered load: if not (a volume-bound
        trace), the per-policy bounds skip it, which saves its time limit per probe."""
        return any(p.bound is not None and p.bound.method == "lp" for p in self.probes)

    @property
    def offered_bound(self) -> Bound | None:
        bounds = [p.bound for p in self.probes if p.bound is not None]
        return max(bounds, key=lambda b: b.hosts) if bounds else None

    # ------------------------------------------------------------------ replay
    def run(
        self,
        policy: Policy,
        periodic: Sequence[PeriodicAction] | None = None,
        name: str | None = None,
    ) -> PolicyRun:
        """Replay under `policy`; `periodic` replaces `options.periodic` for this run (e.g. the
        same policy with and without defragmentation), `name` the run's name in reports. The
        policy's own periodic actions (`Policy.periodic`, e.g. Berth's defragmenter) run too,
        except those named like one of the run's (a run's `defrag` replaces the policy's)."""
        opts = self.options
        extra = list(opts.periodic if periodic is None else periodic)
        named = {getattr(a, "name", None) for a in extra} - {None}
        # the policy's own actions, unless the run brings one of the same `name` (e.g. defrag)
        actions = [a for a in policy.periodic if getattr(a, "name", None) not in named] + extra
        tr = self.trace
        config = lean_config(policy, self.base, self.flavors_used, self.zoned, self.now)
        main = FilterScheduler.from_config(config)
        warm = main
        if opts.warmup is not None:
            warm_config = lean_config(
                opts.warmup, self.base, self.flavors_used, self.zoned, self.now
            )
            warm = FilterScheduler.from_config(warm_config)
        scheduler = warm if self.ev_time.size and self.ev_time[0] < tr.window_start else main
        dynamic = frozenset(f.name for f in main.filters if not f.static)
        table = self.base.copy()
        now = self.now
        clock = opts.clock
        ids = tr.ids
        # per-request columns as Python lists: the event loop reads them one scalar at a time
        keys = list(zip(tr.flavor.tolist(), tr.zone.tolist(), tr.group.tolist(), strict=True))
        business_of: list[int] = tr.business.tolist()
        starts = tr.start
        preemptible_req: list[bool] = tr.preemptible.tolist()
        names = tr.flavor_names
        could_fit = [bool(self.eligible[f].any()) for f in names]
        zones = tr.zones
        groups = [g.id for g in tr.groups]
        seeds: list[int] = (
            np.random.default_rng(opts.seed).integers(0, 2**62, size=len(tr), dtype=np.int64)
        ).tolist()
        row_of = table.index
        ws, wlen = tr.window_start, tr.window
        nb = len(BUSINESS_LABELS)

        outcome = np.zeros(len(tr), dtype=np.int8)
        host_row = np.full(len(tr), -1, dtype=np.int32)
        alive = [False] * len(tr)
        arrivals = np.zeros((self.n_windows, nb), dtype=np.int64)
        accepted = np.zeros((self.n_windows, nb), dtype=np.int64)
        evicted = np.zeros((self.n_windows, nb), dtype=np.int64)
        failures: dict[str, dict[str, int]] = {b: {} for b in BUSINESS_LABELS}
        messages: dict[str, str] = {}
        latency = np.zeros(int((self.ev_kind == 1).sum()), dtype=np.int64)
        commit_ns = 0
        decisions = 0
        events = 0
        evictions = 0
        periodic_events = 0
        templates: dict[tuple[int, int, int], RequestSpec] = {}
        position = {rid: i for i, rid in enumerate(ids)}
        victims_by_host: dict[str, set[str]] = {}
        evictor = opts.evictor
        fast = opts.fast

        def is_preemptible(alloc: Allocation) -> bool:
            i = position.get(alloc.instance_id)
            return i is not None and preemptible_req[i] and alive[i]

        current = [0.0]

        def created_at(alloc: Allocation) -> float:
            # the core's `now` is the fleet's reference time; express age on that clock
            i = position.get(alloc.instance_id)
            age = 0.0 if i is None else current[0] - float(starts[i])
            return now - age

        victims = Victims(is_preemptible, created_at, victims_by_host)

        sample_times: list[float] = []
        samples: list[tuple[float, ...]] = []
        frag: list[list[float]] = []
        tracked = self.tracked
        eligible = self.eligible
        step = self.sample_every
        next_sample = ws
        state = ReplayState(
            table, scheduler, now, victims_by_host=victims_by_host, tracked=tracked, seed=opts.seed
        )
        migrations = np.zeros(self.n_windows, dtype=np.int64)
        admit_limit = policy.admission_migrations
        # a common warm-up policy places the initial VMs its own way, migrations included
        limit = admit_limit
        if scheduler is warm and opts.warmup is not None:
            limit = opts.warmup.admission_migrations
        admit_tries = admit_ns = 0
        admitted = np.zeros(self.n_windows, dtype=np.int64)
        admit_moves = np.zeros(self.n_windows, dtype=np.int64)
        # host -> instances: built at the first admission search and kept from then on (a
        # fleet that never needs one never pays for it)
        hosted: dict[str, set[str]] | None = None
        schedule = [(a, ws + a.interval) for a in actions]
        probe_at = {p.event: p for p in self.probes}
        held: list[tuple[Probe, dict[str, int], int]] = []

        def sample(t: float) -> None:
            snap = snapshot(table, self.cpu_cap, self.mem_cap, opts.full_fraction)
            sample_times.append(t)
            samples.append(tuple(float(getattr(snap, f)) for f in SAMPLE_FIELDS))
            frag.append([fragmentation_rate(table, f, eligible[f]) for f in tracked])

        ev_time: list[float] = self.ev_time.tolist()
        ev_kind: list[int] = self.ev_kind.tolist()
        ev_idx: list[int] = self.ev_idx.tolist()
        total = len(ev_time)
        progress, every = opts.progress, max(1, opts.progress_every)
        started = clock()
        for k in range(total):
            t = ev_time[k]
            if t >= next_sample:
                while t >= next_sample:
                    sample(next_sample)
                    next_sample += step
            if t >= ws and scheduler is not main:
                scheduler = main
                state.scheduler = main
                limit = admit_limit
            if schedule:
                for j, (action, due) in enumerate(schedule):
                    while t >= due:
                        state.events = 0
                        done = action(state, due)
                        periodic_events += done
                        migrations[min(int((due - ws) // wlen) + 1, self.n_windows - 1)] += done
                        due += action.interval
                    schedule[j] = (action, due)
            i = ev_idx[k]
            if ev_kind[k] == 0:  # departure
                if alive[i]:
                    rid = ids[i]
                    if preemptible_req[i] or hosted is not None:
                        state.forget(rid, table.allocations[rid].host)
                    table.release(rid)
                    alive[i] = False
                    events += 1
            else:  # arrival
                b = business_of[i]
                w = int((t - ws) // wlen) + 1 if t >= ws else 0
                arrivals[w, b] += 1
                key = keys[i]
                tmpl = templates.get(key)
                if tmpl is None:
                    tmpl = templates[key] = RequestSpec(
                        flavor=names[key[0]],
                        availability_zone=zones[key[1]] if key[1] >= 0 else None,
                        server_group=groups[key[2]] if key[2] >= 0 else None,
                    )
                rid = ids[i]
                seed = seeds[i]
                t0 = clock()
                host: str | None = None
                decision: Decision | None = None
                try:
                    if fast:
                        alloc = scheduler.place_one(table, tmpl, now, instance_id=rid, seed=seed)
                        host = alloc.host
                    else:
                        request = tmpl.model_copy(update={"instance_ids": (rid,), "seed": seed})
                        decision = scheduler.select_destinations(table, request, now)
                except NoValidHost as exc:
                    latency[decisions] = clock() - t0
                    decisions += 1
                    code = _main_reason(exc, dynamic)
                    if code not in messages:
                        messages[code] = str(exc.diagnosis)
                    plan = None
                    admission = None
                    if limit and could_fit[key[0]]:  # before any eviction
                        t2 = clock()
                        if hosted is None:
                            hosted = state.hosted = {}
                            for alloc in table.allocations.values():
                                hosted.setdefault(alloc.host, set()).add(alloc.instance_id)
                        admission = plan_admission(
                            table,
                            tmpl,
                            scheduler=scheduler,
                            now=now,
                            max_migrations=limit,
                            hosted=hosted,
                        )
                        admit_ns += clock() - t2
                        admit_tries += 1
                    if admission is not None:
                        apply_moves(table, admission.moves)
                        for move in admission.moves:
                            state.moved(move.instance_id, move.source, move.target)
                        done = len(admission.moves)
                        admitted[w] += 1
                        state.pressure += 1
                        admit_moves[w] += done
                        events += done
                        if fast:
                            host = scheduler.place_one(
                                table, tmpl, now, instance_id=rid, seed=seed
                            ).host
                        else:
                            request = tmpl.model_copy(update={"instance_ids": (rid,), "seed": seed})
                            decision = scheduler.select_destinations(table, request, now)
                    elif evictor is not None and not preemptible_req[i]:
                        current[0] = t
                        request = tmpl.model_copy(update={"instance_ids": (rid,), "seed": seed})
                        plan = evictor(scheduler, table, request, now, victims)
                    if admission is None and plan is None:
                        failures[BUSINESS_LABELS[b]][code] = (
                            failures[BUSINESS_LABELS[b]].get(code, 0) + 1
                        )
                        if could_fit[key[0]]:
                            state.pressure += 1
                        outcome[i] = REJECTED
                        events += 1
                    elif plan is not None:
                        decision = plan.decision
                    for vid in plan.evictions if plan is not None else ():
                        v = position[vid]
                        alloc = table.release(vid)
                        state.forget(vid, alloc.host)
                        alive[v] = False
                        outcome[v] = EVICTED
                        evicted[w, business_of[v]] += 1
                        evictions += 1
                        events += 1
                else:
                    latency[decisions] = clock() - t0
                    decisions += 1
                if decision is not None:
                    t1 = clock()
                    commit(table, decision)
                    commit_ns += clock() - t1
                    host = decision.selections[0].host
                if host is not None:
                    events += 1
                    host_row[i] = row_of[host]
                    outcome[i] = ACCEPTED
                    alive[i] = True
                    accepted[w, b] += 1
                    if preemptible_req[i] or hosted is not None:
                        state.placed(rid, host, preemptible_req[i])
            probe = probe_at.get(k)
            if probe is not None:
                held.append(
                    (probe, self._held(np.array(alive)), int((table.n_instances > 0).sum()))
                )
            if progress is not None and k % every == 0:
                progress(k, total)
        end_time = ev_time[-1] if total else ws
        final = tr.horizon if math.isfinite(tr.horizon) else end_time
        while next_sample <= final:
            sample(next_sample)
            next_sample += step
        wall = clock() - started
        if progress is not None:
            progress(total, total)
        probe_out = [self._probe(p, load, used) for p, load, used in held]
        return PolicyRun(
            policy=name or policy.name,
            description=policy.description,
            config=config,
            outcome=outcome,
            host=host_row,
            windows=self.window_starts,
            arrivals=arrivals,
            accepted=accepted,
            evicted=evicted,
            failures={b: dict(sorted(v.items())) for b, v in failures.items()},
            failure_messages=messages,
            sample_times=np.array(sample_times, dtype=np.float64),
            samples=np.array(samples, dtype=np.float64).reshape(-1, len(SAMPLE_FIELDS)),
            tracked=list(tracked),
            fragmentation=np.array(frag, dtype=np.float64).reshape(-1, len(tracked)),
            fragmentation_final={
                f: fragmentation_rate(table, f, eligible[f]) for f in tr.flavor_names
            },
            latency_ns=latency[:decisions],
            commit_ns=commit_ns,
            wall_ns=wall,
            events=events,
            decisions=decisions,
            evictions=evictions,
            periodic_events=periodic_events,
            periodic_log=state.log,
            migrations=migrations,
            admission_migrations=admit_limit,
            admitted=admitted,
            admission_moves=admit_moves,
            admission_searches=admit_tries,
            admission_ns=admit_ns,
            probes=probe_out,
            preemption=evictor.name if evictor is not None else "off",
        )

    def _held(self, alive: npt.NDArray[np.bool_]) -> dict[str, int]:
        counts = np.bincount(self.trace.flavor[alive], minlength=len(self.trace.flavor_names))
        held = {f: int(c) for f, c in zip(self.trace.flavor_names, counts, strict=True) if c}
        for f, c in self.preexisting.items():
            held[f] = held.get(f, 0) + c
        return held

    def _probe(self, probe: Probe, held: dict[str, int], used: int) -> dict[str, Any]:
        """Used hosts and a bound on the load this policy holds, at an offered-load peak."""
        out: dict[str, Any] = {
            "label": probe.label,
            "time": float(self.ev_time[probe.event]),
            "used_hosts": used,
            "held_instances": int(sum(held.values())),
            "offered_instances": int(sum(probe.offered.values())),
            "offered_bound": probe.bound.hosts if probe.bound else None,
        }
        if self.options.bound:
            b = lower_bound(
                self.base, held, lp=self.lp_useful, time_limit=self.options.bound_time_limit
            )
            out["held_bound"] = b.hosts
            out["held_bound_method"] = b.method
            out["distance"] = used / b.hosts - 1 if b.hosts else 0.0
        return out


def _main_reason(exc: NoValidHost, dynamic: frozenset[str]) -> str:
    """The failure's main reason: the reason covering the most hosts among the filters that
    depend on the fleet's state (resources, groups), since scope filters (zone, traits) reject
    hosts the request never wanted; the overall top reason when no state filter rejected any.
    """
    reasons = exc.diagnosis.reasons
    for r in reasons:  # sorted by hosts, most first
        if r.filter in dynamic:
            return r.code
    return reasons[0].code if reasons else "no_hosts"


def business_names() -> list[str]:
    return [b.label for b in Business]
