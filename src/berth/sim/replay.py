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
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core import jit
from berth.core.config import SchedulerConfig
from berth.core.defrag import apply_moves
from berth.core.defrag.admit import Admission, plan_admission
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.explain import NoValidHost
from berth.core.model import Fleet
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.sim.bound import Bound
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
from berth.sim.probes import Probe, load_counts, peak_probes, probe_record
from berth.sim.trace import BUSINESS_LABELS, Business, Trace
from berth.sim.types import PeriodicAction, PolicyRun, ReplayState

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
        self.probes = peak_probes(
            self.base, trace, self.ev_kind, self.ev_idx, self.preexisting, self._bound_limit
        )

    @property
    def _bound_limit(self) -> float | None:
        """The bounds' time limit, None when the options turn bounds off."""
        return self.options.bound_time_limit if self.options.bound else None

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
        # window k >= 1 holds [ws + (k-1) w, ws + k w): an arrival exactly on the last
        # boundary opens one more window (floor + 1, which the ceiling above misses)
        arrivals = self.ev_time[self.ev_kind == 1]
        if arrivals.size and arrivals[-1] >= ws:
            self.n_windows = max(self.n_windows, int((arrivals[-1] - ws) // w) + 2)
        self.window_starts = np.concatenate([[-math.inf], ws + w * np.arange(self.n_windows - 1)])

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
        config = lean_config(policy, self.base, self.flavors_used, self.zoned, self.now)
        main = FilterScheduler.from_config(config)
        warm = main
        if opts.warmup is not None:
            warm_config = lean_config(
                opts.warmup, self.base, self.flavors_used, self.zoned, self.now
            )
            warm = FilterScheduler.from_config(warm_config)
        replay = _Replay(self, policy, main, warm, actions)
        replay.loop()
        return replay.result(name or policy.name, policy.description, config)


class _Replay:
    """One run of a `Simulation`: its mutable state, the event loop, and the raw result.

    The loop (`loop`) reads everything it needs per event from locals, as one flat function:
    it is what `benchmarks/bench_sim.py` times in events per CPU second. Rarer steps (samples,
    periodic actions, a request that fits nowhere) are methods it calls.
    """

    def __init__(
        self,
        sim: Simulation,
        policy: Policy,
        main: FilterScheduler,
        warm: FilterScheduler,
        actions: Sequence[PeriodicAction],
    ) -> None:
        opts, tr = sim.options, sim.trace
        n, windows, nb = len(tr), sim.n_windows, len(BUSINESS_LABELS)
        self.sim, self.opts, self.main = sim, opts, main
        self.scheduler = warm if sim.ev_time.size and sim.ev_time[0] < tr.window_start else main
        self.admit_limit = policy.admission_migrations
        # a common warm-up policy places the initial VMs its own way, migrations included
        self.limit = self.admit_limit
        if self.scheduler is warm and opts.warmup is not None:
            self.limit = opts.warmup.admission_migrations
        self.dynamic = frozenset(f.name for f in main.filters if not f.static)
        self.table = sim.base.copy()
        # per-request columns as Python lists: the event loop reads them one scalar at a time
        self.keys = list(zip(tr.flavor.tolist(), tr.zone.tolist(), tr.group.tolist(), strict=True))
        self.business_of: list[int] = tr.business.tolist()
        self.preemptible_req: list[bool] = tr.preemptible.tolist()
        self.could_fit = [bool(sim.eligible[f].any()) for f in tr.flavor_names]
        self.groups = [g.id for g in tr.groups]
        self.seeds: list[int] = (
            np.random.default_rng(opts.seed).integers(0, 2**62, size=n, dtype=np.int64)
        ).tolist()
        self.outcome = np.zeros(n, dtype=np.int8)
        self.host_row = np.full(n, -1, dtype=np.int32)
        self.alive = [False] * n
        self.arrivals = np.zeros((windows, nb), dtype=np.int64)
        self.accepted = np.zeros((windows, nb), dtype=np.int64)
        self.evicted = np.zeros((windows, nb), dtype=np.int64)
        self.failures: dict[str, dict[str, int]] = {b: {} for b in BUSINESS_LABELS}
        self.messages: dict[str, str] = {}
        self.latency = np.zeros(int((sim.ev_kind == 1).sum()), dtype=np.int64)
        self.migrations = np.zeros(windows, dtype=np.int64)
        self.admitted = np.zeros(windows, dtype=np.int64)
        self.admit_moves = np.zeros(windows, dtype=np.int64)
        self.commit_ns = self.decisions = self.events = self.evictions = 0
        self.periodic_events = self.admit_tries = self.admit_ns = self.wall = 0
        self.position = {rid: i for i, rid in enumerate(tr.ids)}
        self.current = 0.0
        """Virtual time of the arrival being evicted for (the victims' ages)."""
        self.victims_by_host: dict[str, set[str]] = {}
        self.victims = Victims(self._is_preemptible, self._created_at, self.victims_by_host)
        self.state = ReplayState(
            self.table,
            self.scheduler,
            sim.now,
            victims_by_host=self.victims_by_host,
            tracked=sim.tracked,
            seed=opts.seed,
        )
        self.sample_times: list[float] = []
        self.samples: list[tuple[float, ...]] = []
        self.frag: list[list[float]] = []
        self.schedule = [(a, tr.window_start + a.interval) for a in actions]
        self.held: list[tuple[Probe, dict[str, int], int]] = []

    def _is_preemptible(self, alloc: Allocation) -> bool:
        i = self.position.get(alloc.instance_id)
        return i is not None and self.preemptible_req[i] and self.alive[i]

    def _created_at(self, alloc: Allocation) -> float:
        # the core's `now` is the fleet's reference time; express age on that clock
        i = self.position.get(alloc.instance_id)
        age = 0.0 if i is None else self.current - float(self.sim.trace.start[i])
        return self.sim.now - age

    def _sample(self, t: float) -> None:
        sim = self.sim
        snap = snapshot(self.table, sim.cpu_cap, sim.mem_cap, self.opts.full_fraction)
        self.sample_times.append(t)
        self.samples.append(tuple(float(getattr(snap, f)) for f in SAMPLE_FIELDS))
        self.frag.append([fragmentation_rate(self.table, f, sim.eligible[f]) for f in sim.tracked])

    def _run_due(self, t: float) -> float:
        """Run every periodic action due at or before `t`; returns the next instant one is due."""
        sim, ws = self.sim, self.sim.trace.window_start
        state = self.state
        for j, (action, due) in enumerate(self.schedule):
            while t >= due:
                state.events = 0
                done = action(state, due)
                self.periodic_events += done
                window = min(int((due - ws) // sim.trace.window) + 1, sim.n_windows - 1)
                self.migrations[window] += done
                due += action.interval
            self.schedule[j] = (action, due)
        return min(due for _, due in self.schedule)

    def loop(self) -> None:
        """Every event in time order (module docstring)."""
        sim, opts, tr = self.sim, self.opts, self.sim.trace
        main, scheduler = self.main, self.scheduler
        table, state, now, clock, fast = self.table, self.state, sim.now, opts.clock, opts.fast
        ids, seeds = tr.ids, self.seeds
        keys, business_of, preemptible_req = self.keys, self.business_of, self.preemptible_req
        outcome, host_row, alive, latency = self.outcome, self.host_row, self.alive, self.latency
        arrivals, accepted, row_of = self.arrivals, self.accepted, table.index
        ws, wlen, step = tr.window_start, tr.window, sim.sample_every
        commit_ns = decisions = events = 0
        templates: dict[tuple[int, int, int], RequestSpec] = {}
        hosted: dict[str, set[str]] | None = None
        next_sample = ws
        next_due = min((due for _, due in self.schedule), default=math.inf)
        probe_at = {p.event: p for p in sim.probes}
        ev_time: list[float] = sim.ev_time.tolist()
        ev_kind: list[int] = sim.ev_kind.tolist()
        ev_idx: list[int] = sim.ev_idx.tolist()
        total = len(ev_time)
        progress, every = opts.progress, max(1, opts.progress_every)
        started = clock()
        for k in range(total):
            t = ev_time[k]
            if t >= next_sample:
                while t >= next_sample:
                    self._sample(next_sample)
                    next_sample += step
            if t >= ws and scheduler is not main:
                scheduler = self.scheduler = state.scheduler = main
                self.limit = self.admit_limit
            if t >= next_due:
                next_due = self._run_due(t)
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
                    tmpl = templates[key] = self._template(key)
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
                    host, decision = self._refused(exc, i, t, w, tmpl)
                    hosted = state.hosted
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
                used = int((table.n_instances > 0).sum())
                held = load_counts(tr, np.array(alive), sim.preexisting)
                self.held.append((probe, held, used))
            if progress is not None and k % every == 0:
                progress(k, total)
        self._finish(ev_time[-1] if total else ws, next_sample, started)
        self.commit_ns += commit_ns
        self.decisions += decisions
        self.events += events

    def _template(self, key: tuple[int, int, int]) -> RequestSpec:
        """The request of one (flavor, zone, group) column triple, built once per replay."""
        tr = self.sim.trace
        flavor, zone, group = key
        return RequestSpec(
            flavor=tr.flavor_names[flavor],
            availability_zone=tr.zones[zone] if zone >= 0 else None,
            server_group=self.groups[group] if group >= 0 else None,
        )

    def _finish(self, end_time: float, next_sample: float, started: int) -> None:
        """The samples after the last event, up to the trace's horizon; the wall time."""
        horizon = self.sim.trace.horizon
        final = horizon if math.isfinite(horizon) else end_time
        while next_sample <= final:
            self._sample(next_sample)
            next_sample += self.sim.sample_every
        self.wall = self.opts.clock() - started
        if self.opts.progress is not None:
            total = self.sim.ev_time.size
            self.opts.progress(total, total)

    def _refused(
        self, exc: NoValidHost, i: int, t: float, w: int, tmpl: RequestSpec
    ) -> tuple[str | None, Decision | None]:
        """A request that fits nowhere: admission by migration, else eviction, else a refusal
        counted by its main reason. Returns where it goes (a host, or a decision to commit)."""
        table, state, scheduler, now = self.table, self.state, self.scheduler, self.sim.now
        rid, seed, flavor = self.sim.trace.ids[i], self.seeds[i], self.keys[i][0]
        code = _main_reason(exc, self.dynamic)
        if code not in self.messages:
            self.messages[code] = str(exc.diagnosis)
        host: str | None = None
        decision: Decision | None = None
        plan = None
        admission = None
        if self.limit and self.could_fit[flavor]:  # before any eviction
            admission = self._admission(tmpl)
        if admission is not None:
            apply_moves(table, admission.moves)
            for move in admission.moves:
                state.moved(move.instance_id, move.source, move.target)
            done = len(admission.moves)
            self.admitted[w] += 1
            state.pressure += 1
            self.admit_moves[w] += done
            self.events += done
            if self.opts.fast:
                host = scheduler.place_one(table, tmpl, now, instance_id=rid, seed=seed).host
            else:
                request = tmpl.model_copy(update={"instance_ids": (rid,), "seed": seed})
                decision = scheduler.select_destinations(table, request, now)
        elif self.opts.evictor is not None and not self.preemptible_req[i]:
            self.current = t
            request = tmpl.model_copy(update={"instance_ids": (rid,), "seed": seed})
            plan = self.opts.evictor(scheduler, table, request, now, self.victims)
        if admission is None and plan is None:
            by_code = self.failures[BUSINESS_LABELS[self.business_of[i]]]
            by_code[code] = by_code.get(code, 0) + 1
            if self.could_fit[flavor]:
                state.pressure += 1
            self.outcome[i] = REJECTED
            self.events += 1
        elif plan is not None:
            decision = plan.decision
        for vid in plan.evictions if plan is not None else ():
            self._evict(vid, w)
        return host, decision

    def _admission(self, tmpl: RequestSpec) -> Admission | None:
        """`plan_admission` for a request that fits nowhere (timed; builds the host index the
        first time: a fleet that never needs one never pays for it)."""
        clock, state = self.opts.clock, self.state
        t2 = clock()
        if state.hosted is None:
            hosted: dict[str, set[str]] = {}
            for alloc in self.table.allocations.values():
                hosted.setdefault(alloc.host, set()).add(alloc.instance_id)
            state.hosted = hosted
        admission = plan_admission(
            self.table,
            tmpl,
            scheduler=self.scheduler,
            now=self.sim.now,
            max_migrations=self.limit,
            hosted=state.hosted,
        )
        self.admit_ns += clock() - t2
        self.admit_tries += 1
        return admission

    def _evict(self, vid: str, w: int) -> None:
        v = self.position[vid]
        alloc = self.table.release(vid)
        self.state.forget(vid, alloc.host)
        self.alive[v] = False
        self.outcome[v] = EVICTED
        self.evicted[w, self.business_of[v]] += 1
        self.evictions += 1
        self.events += 1

    def _probe(self, probe: Probe, held: dict[str, int], used: int) -> dict[str, Any]:
        sim = self.sim
        time = float(sim.ev_time[probe.event])
        return probe_record(
            sim.base, probe, time, held, used, lp=sim.lp_useful, time_limit=sim._bound_limit
        )

    def result(self, name: str, description: str, config: SchedulerConfig) -> PolicyRun:
        sim, tracked, table = self.sim, self.sim.tracked, self.table
        evictor = self.opts.evictor
        return PolicyRun(
            policy=name,
            description=description,
            config=config,
            outcome=self.outcome,
            host=self.host_row,
            windows=sim.window_starts,
            arrivals=self.arrivals,
            accepted=self.accepted,
            evicted=self.evicted,
            failures={b: dict(sorted(v.items())) for b, v in self.failures.items()},
            failure_messages=self.messages,
            sample_times=np.array(self.sample_times, dtype=np.float64),
            samples=np.array(self.samples, dtype=np.float64).reshape(-1, len(SAMPLE_FIELDS)),
            tracked=list(tracked),
            fragmentation=np.array(self.frag, dtype=np.float64).reshape(-1, len(tracked)),
            fragmentation_final={
                f: fragmentation_rate(table, f, sim.eligible[f]) for f in sim.trace.flavor_names
            },
            latency_ns=self.latency[: self.decisions],
            commit_ns=self.commit_ns,
            wall_ns=self.wall,
            events=self.events,
            decisions=self.decisions,
            evictions=self.evictions,
            periodic_events=self.periodic_events,
            periodic_log=self.state.log,
            migrations=self.migrations,
            admission_migrations=self.admit_limit,
            admitted=self.admitted,
            admission_moves=self.admit_moves,
            admission_searches=self.admit_tries,
            admission_ns=self.admit_ns,
            probes=[self._probe(p, load, used) for p, load, used in self.held],
            preemption=evictor.name if evictor is not None else "off",
        )


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
