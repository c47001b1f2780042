"""Hypothesis properties of the controller: caps, minimums, reasons, determinism, no flapping."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.elastic.actions import Code, Drain, Reap, Retire, Start
from berth.elastic.controller import decide
from berth.elastic.history import advance_history
from berth.elastic.model import GroupSpec, Vm, VmState
from berth.elastic.state import ControllerConfig, ControlState, FailureHistory, GroupHistory
from tests.elastic.builders import group, state, vm

START_NOTES = {
    Code.AT_MAX,
    Code.GROUP_BACKOFF,
    Code.HYSTERESIS,
    Code.RATE_LIMIT,
    Code.GLOBAL_CAP,
    Code.NO_ROOM,
    Code.FAIR_SHARE,
    Code.CLUSTER_BACKOFF,
}
LIVE = (VmState.REQUESTED, VmState.BOOTING, VmState.JOINED, VmState.DRAINING)


@st.composite
def groups(draw: st.DrawFn) -> list[GroupSpec]:
    n = draw(st.integers(1, 4))
    out = []
    for i in range(n):
        lo = draw(st.integers(0, 3))
        hi = draw(st.integers(lo, 12))
        cores = draw(st.sampled_from([1, 2, 4, 8]))
        max_cores = draw(st.one_of(st.none(), st.integers(0, 60)))
        out.append(
            group(
                f"g{i}",
                min_vms=lo,
                max_vms=hi,
                max_cores=max_cores,
                cores=cores,
                slots=draw(st.integers(1, 8)),
                share=draw(st.sampled_from([0.5, 1.0, 3.0])),
                flavor=draw(st.sampled_from(["f1", "f2"])),
            )
        )
    return out


@st.composite
def states(draw: st.DrawFn) -> ControlState:
    gs = draw(groups())
    now = 10_000.0
    names = [g.name for g in gs] + ["orphan"]
    vms = []
    running = {}
    for i in range(draw(st.integers(0, 25))):
        s = draw(st.sampled_from(LIVE))
        g = draw(st.sampled_from(names))
        since = now - draw(st.integers(0, 8000))
        hb = draw(st.one_of(st.none(), st.floats(now - 1000, now)))
        idle = draw(st.one_of(st.none(), st.floats(now - 3000, now)))
        v = vm(
            f"v{i:02d}",
            g,
            s,
            since=since,
            heartbeat=hb,
            idle_since=idle,
            cluster=draw(st.sampled_from(["c1", "c2"])),
        )
        vms.append(v)
        running[v.name] = draw(st.integers(0, 8))
    idle_jobs = {g.name: draw(st.integers(0, 60)) for g in gs}
    room = {c: {f: draw(st.integers(0, 20)) for f in ("f1", "f2")} for c in ("c1", "c2")}
    hist = {
        g.name: GroupHistory(
            last_start=draw(st.one_of(st.none(), st.floats(now - 2000, now))),
            last_drain=draw(st.one_of(st.none(), st.floats(now - 2000, now))),
            boots=FailureHistory(draw(st.integers(0, 3)), now - draw(st.integers(0, 600))),
        )
        for g in gs
    }
    evict = frozenset(draw(st.lists(st.sampled_from([v.name for v in vms]))) if vms else [])
    return state(
        now,
        gs,
        idle=idle_jobs,
        vms=vms,
        running=running,
        room=room,
        history=hist,
        clusters={"c1": FailureHistory(draw(st.integers(0, 2)), now - 100)},
        evict=evict,
        global_max_vms=draw(st.one_of(st.none(), st.integers(0, 40))),
        global_max_cores=draw(st.one_of(st.none(), st.integers(0, 200))),
    )


CFG = ControllerConfig(max_starts=15, max_starts_per_group=6, max_drains=5)


def _live_after(s: ControlState, d) -> tuple[int, int]:
    """VMs and cores the cloud holds after the decision: every live VM but the reaped ones
    (deleted at once; a retiring VM's server goes only after its agent's shutdown), plus the
    starts."""
    gone = {a.vm for a in d.actions if isinstance(a, Reap)}
    cores = {g.name: g.cores_per_vm for g in s.groups}
    live = [v for v in s.vms if v.state in LIVE and v.name not in gone]
    started = {a.group: a.count for a in d.starts()}
    n = len(live) + sum(started.values())
    c = sum(cores.get(v.group, 0) for v in live) + sum(cores[g] * k for g, k in started.items())
    return n, c


@settings(max_examples=120, deadline=None)
@given(states())
def test_never_above_a_maximum_or_the_global_cap(s: ControlState) -> None:
    d = decide(s, CFG)
    for g in s.groups:
        r = d.report(g.name)
        if r.started:
            assert r.active_vms + r.started <= g.max_vms
            if g.max_cores is not None:
                assert (r.active_vms + r.started) * g.cores_per_vm <= g.max_cores
    if d.starts():
        n, c = _live_after(s, d)
        assert s.global_max_vms is None or n <= s.global_max_vms
        assert s.global_max_cores is None or c <= s.global_max_cores
    assert sum(a.count for a in d.starts()) <= CFG.max_starts


@settings(max_examples=150, deadline=None)
@given(states())
def test_never_above_a_maximum_counting_draining_vms(s: ControlState) -> None:
    """A group that starts VMs stays within `max_vms` and `max_cores` counting every VM it
    still holds — draining and retiring ones included —, and the pool within its global caps."""
    d = decide(s, CFG)
    reaped = {a.vm for a in d.actions if isinstance(a, Reap)}
    for g in s.groups:
        started = sum(a.count for a in d.starts() if a.group == g.name)
        if not started:
            continue
        held = [v for v in s.vms if v.group == g.name and v.state in LIVE and v.name not in reaped]
        assert len(held) + started <= g.max_vms, (g, held, started)
        if g.max_cores is not None:
            assert (len(held) + started) * g.cores_per_vm <= g.max_cores
    n, c = _live_after(s, d)
    if d.starts():
        assert s.global_max_vms is None or n <= s.global_max_vms
        assert s.global_max_cores is None or c <= s.global_max_cores


@settings(max_examples=120, deadline=None)
@given(states())
def test_never_below_a_minimum_and_every_shortfall_explained(s: ControlState) -> None:
    d = decide(s, CFG)
    for g in s.groups:
        r = d.report(g.name)
        idle_drains = [a for a in d.drains() if a.group == g.name and a.reason.code is Code.IDLE]
        if idle_drains:
            assert r.active_vms - len(idle_drains) >= g.min_vms
            assert r.started == 0
        if r.started < r.wanted:  # a group below its minimum or with demand that got less
            held = sum(n.vms for n in r.notes if n.code in START_NOTES)
            assert held >= r.wanted - r.started, r


@settings(max_examples=80, deadline=None)
@given(states(), st.randoms(use_true_random=False))
def test_deterministic_whatever_the_record_order(s: ControlState, rnd: random.Random) -> None:
    shuffled = list(s.vms)
    rnd.shuffle(shuffled)
    again = ControlState(**{**s.__dict__, "vms": shuffled})
    assert decide(s, CFG) == decide(again, CFG)


def _run(
    blocks: list[tuple[int, int]], cfg: ControllerConfig, seed: int
) -> dict[str, list[tuple[float, str]]]:
    """Cycles of 60 s under blocks of (idle jobs, cycles); the moves (time, kind) per group."""
    gs = [group("a", max_vms=15, min_vms=1), group("b", max_vms=15)]
    rnd = random.Random(seed)
    vms: dict[str, Vm] = {}
    hist: dict[str, GroupHistory] = {}
    clusters: dict[str, FailureHistory] = {}
    moves: dict[str, list[tuple[float, str]]] = {"a": [], "b": []}
    running: dict[str, int] = {}
    levels = [level for level, n in blocks for _ in range(n)]
    for cycle, level in enumerate(levels):
        now = 60.0 * cycle
        for name, v in list(vms.items()):  # boots join after 2 cycles unless they fail
            if v.state is VmState.BOOTING and now - v.since >= 120 and rnd.random() > 0.2:
                vms[name] = Vm(name, v.group, VmState.JOINED, now, v.requested_at, "c1")
        noisy = max(0, level + rnd.randint(-3, 3)) if level else 0
        idle = {"a": noisy, "b": max(0, 40 - noisy)}
        for name, v in list(vms.items()):
            busy = idle[v.group] > 0 and v.state is VmState.JOINED
            running[name] = rnd.randint(1, 4) if busy else 0
            if v.state is VmState.JOINED:  # the agent's heartbeat; idle since its last job
                idle_since = None if busy else (now if v.idle_since is None else v.idle_since)
                vms[name] = replace(v, heartbeat=now, idle_since=idle_since)
        s = state(
            now,
            gs,
            idle=idle,
            vms=list(vms.values()),
            running=running,
            room={"c1": {"c4": 30}},
            history=hist,
            clusters=clusters,
        )
        d = decide(s, cfg)
        hist, clusters = advance_history(s, d)
        for a in d.actions:
            if isinstance(a, Start):
                moves[a.group].append((now, "start"))
                for k in range(a.count):
                    n = f"vm{cycle:03d}-{a.group}-{k}"
                    vms[n] = Vm(n, a.group, VmState.BOOTING, now, now, "c1")
            elif isinstance(a, Drain):
                moves[a.group].append((now, "drain"))
                v = vms[a.vm]
                vms[a.vm] = replace(v, state=VmState.DRAINING, since=now)
            elif isinstance(a, Retire | Reap):
                del vms[a.vm]
    return moves


def _flaps(moves: dict[str, list[tuple[float, str]]], window: float) -> list[object]:
    return [
        (g, t1, t2)
        for g, seq in moves.items()
        for t1, k1 in seq
        for t2, k2 in seq
        if k1 == "start" and k2 == "drain" and abs(t1 - t2) < window
    ]


BLOCKS = st.lists(
    st.tuples(st.sampled_from([0, 2, 40]), st.integers(1, 6)), min_size=6, max_size=10
)


@settings(max_examples=25, deadline=None)
@given(BLOCKS, st.integers(0, 2**32 - 1))
def test_no_start_and_stop_of_one_group_within_the_hysteresis_window(
    blocks: list[tuple[int, int]], seed: int
) -> None:
    cfg = ControllerConfig(keep_alive=120, hysteresis=600, boot_deadline=300)
    assert _flaps(_run(blocks, cfg, seed), cfg.hysteresis) == []


def test_the_same_demand_flaps_without_hysteresis() -> None:
    """The property above is not vacuous: with no window, this demand starts and stops."""
    blocks = [(40, 3), (0, 3)] * 5
    cfg = ControllerConfig(keep_alive=120, hysteresis=0, boot_deadline=300)
    assert _flaps(_run(blocks, cfg, 1), 600.0)
    cfg = ControllerConfig(keep_alive=120, hysteresis=600, boot_deadline=300)
    assert _flaps(_run(blocks, cfg, 1), 600.0) == []
    moves = _run([(40, 3), (0, 20)] * 3, cfg, 1)  # long lulls: it does stop, later
    assert _flaps(moves, 600.0) == []
    assert any(k == "drain" for seq in moves.values() for _, k in seq)
