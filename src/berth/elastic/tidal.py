"""Tidal power management: power empty hosts off when demand ebbs, back on before it returns.

Pure planner (docs/elastic.md, "tidal"): from the hosts (cores, cores in use, instances, power
state and since when), the recent demand (samples of cores wanted over time) and `now`, it
decides which hosts to power on or off, each with a reason, and which busy hosts it would like
emptied (`empty`) — `consolidate` then asks Berth's defrag planner (objective `empty-hosts`) for
the live migrations that empty exactly those. The loop disables a host before powering it off
and enables it after powering it on; it never powers off a host that holds an instance or runs
what Berth cannot move (`pinned`): the planner refuses to name one.

Forecast: for each of the last `days` days, the largest demand seen in the window
[now, now + lookahead] shifted back by that many days; the `quantile` of those (1.0 = max),
never below the demand now; times (1 + margin), plus `spare` cores. Capacity on = cores of the
hosts powered on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from berth.cloud.driver import HostPower
from berth.core.defrag import Budget, Objective, Plan, Target, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.resources import C_PCPU, H_VCPU
from berth.core.table import HostTable

DAY = 86_400.0


@dataclass(frozen=True)
class TidalConfig:
    days: int = 7  # how many previous days the forecast looks at
    lookahead: float = 3600.0  # the window ahead whose demand must already fit
    quantile: float = 1.0  # of the per-day peaks (1.0 = the largest)
    margin: float = 0.2  # safety margin over the forecast
    spare: float = 0.0  # cores kept on beyond the forecast (a burst's head start)
    min_on: int = 1  # hosts kept on whatever the forecast
    min_dwell: float = 1800.0  # a host stays in a power state at least this long
    max_off: int = 4  # power-offs per cycle (and hosts one consolidation empties)
    max_on: int = 16  # power-ons per cycle
    max_migrations: int = 8  # live migrations one consolidation may make (0: none)
    max_concurrent: int = 2  # of them in flight at once
    refused_wait: float = 1800.0  # a host whose power-off was refused is left alone this long

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError("quantile: must be within [0, 1]")
        for name in ("days", "min_on", "max_off", "max_on", "max_migrations"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent: must be >= 1")
        for name in ("lookahead", "margin", "spare", "min_dwell", "refused_wait"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")


@dataclass(frozen=True)
class HostView:
    name: str
    cores: float
    used_cores: float
    instances: int
    power: HostPower
    since: float  # when it entered its power state
    pinned: bool = False  # runs what Berth cannot move (or refused to power off): stays on
    emptying: bool = False  # a consolidation is emptying it (it takes no new placement)


@dataclass(frozen=True)
class PowerAction:
    host: str
    on: bool
    reason: str


@dataclass(frozen=True)
class TidalPlan:
    now: float
    forecast: float  # cores the hosts on must offer (margin included)
    on_cores: float  # cores of the hosts on now
    actions: tuple[PowerAction, ...]
    to_empty: int  # busy hosts it would power off once emptied (len(empty))
    notes: tuple[str, ...] = ()
    empty: tuple[str, ...] = ()  # those hosts, cheapest to empty first (consolidate them)
    release: bool = False  # the forecast needs the hosts being emptied: put them back


def forecast(
    samples: Sequence[tuple[float, float]], now: float, current: float, config: TidalConfig
) -> float:
    """Cores wanted over the next `lookahead`, from the same window on previous days."""
    if samples:
        t = np.fromiter((s[0] for s in samples), dtype=np.float64, count=len(samples))
        v = np.fromiter((s[1] for s in samples), dtype=np.float64, count=len(samples))
        peaks = []
        for d in range(1, config.days + 1):
            lo = now - d * DAY
            inside = (t >= lo) & (t <= lo + config.lookahead)
            if inside.any():
                peaks.append(float(v[inside].max()))
        past = float(np.quantile(peaks, config.quantile)) if peaks else 0.0
    else:
        past = 0.0
    return max(past, current) * (1.0 + config.margin) + config.spare


def plan_power(
    hosts: Sequence[HostView],
    samples: Sequence[tuple[float, float]],
    now: float,
    current: float,
    config: TidalConfig,
) -> TidalPlan:
    """Which hosts to power on or off now, and which busy ones to empty so they can go too.

    Hosts being emptied (`emptying`) count as leaving: while the hosts staying on cover the
    forecast they are powered off first once empty; when they do not, `release` puts them back
    (they count as on again) and nothing more is emptied this cycle."""
    need = forecast(samples, now, current, config)
    on = [h for h in hosts if h.power is HostPower.ON]
    off = [h for h in hosts if h.power is HostPower.OFF]
    cap = sum(h.cores for h in on)
    notes: list[str] = []
    leaving = {h.name for h in on if h.emptying}
    stay_cap = cap - sum(h.cores for h in on if h.name in leaving)
    release = bool(leaving) and stay_cap < need
    if release:
        notes.append(f"forecast {need:g} cores > {stay_cap:g} without the hosts being emptied")
        leaving, stay_cap = set(), cap
    if cap < need:
        actions, cap = _power_on(off, cap, need, config, notes)
        return TidalPlan(now, need, cap, actions, 0, tuple(notes), release=release)
    actions, stay_cap, kept_on = _power_off(on, leaving, stay_cap, need, now, config, notes)
    empty = (
        () if release else _to_empty(on, leaving, actions, stay_cap - need, kept_on, now, config)
    )
    if empty:
        notes.append(f"{len(empty)} more hosts could power off once emptied (consolidate)")
    return TidalPlan(now, need, cap, actions, len(empty), tuple(notes), empty, release)


def _power_on(
    off: Sequence[HostView], cap: float, need: float, config: TidalConfig, notes: list[str]
) -> tuple[tuple[PowerAction, ...], float]:
    actions: list[PowerAction] = []
    for h in sorted(off, key=lambda h: (-h.cores, h.name)):
        if cap >= need or len(actions) >= config.max_on:
            break
        actions.append(PowerAction(h.name, True, f"forecast {need:g} cores > {cap:g} on"))
        cap += h.cores
    if cap < need:
        notes.append(f"short of the forecast by {need - cap:g} cores")
    return tuple(actions), cap


def _power_off(
    on: Sequence[HostView],
    leaving: set[str],
    stay_cap: float,
    need: float,
    now: float,
    config: TidalConfig,
    notes: list[str],
) -> tuple[tuple[PowerAction, ...], float, int]:
    """Empty hosts to power off (the ones a consolidation emptied first, then largest first);
    the actions, the cores staying on and how many hosts stay on (the leaving ones not counted)."""
    empty = sorted(
        (h for h in on if h.instances == 0 and h.used_cores <= 0 and not h.pinned),
        key=lambda h: (h.name not in leaving, -h.cores, h.name),
    )
    actions: list[PowerAction] = []
    kept_on = len(on) - len(leaving)
    for h in empty:
        if len(actions) >= config.max_off:
            break
        if now - h.since < config.min_dwell:
            notes.append(f"{h.name}: on since {h.since:g}, within the dwell time")
            continue
        if h.name in leaving:  # emptied for this: already counted out of the cores staying on
            actions.append(PowerAction(h.name, False, f"emptied; {stay_cap:g} cores stay on"))
            continue
        if kept_on <= config.min_on:
            break
        if stay_cap - h.cores < need:
            continue
        text = f"empty; {stay_cap - h.cores:g} cores stay on for a forecast of {need:g}"
        actions.append(PowerAction(h.name, False, text))
        stay_cap -= h.cores
        kept_on -= 1
    return tuple(actions), stay_cap, kept_on


def _to_empty(
    on: Sequence[HostView],
    leaving: set[str],
    actions: Sequence[PowerAction],
    spare: float,
    kept_on: int,
    now: float,
    config: TidalConfig,
) -> tuple[str, ...]:
    """Busy hosts worth emptying: fewest cores in use first, while the hosts staying on still
    cover the forecast, keep `min_on`, have the free cores for what moves, and the moves fit in
    `max_migrations` (at most `max_off` hosts, none within the dwell time, none pinned)."""
    if config.max_migrations <= 0 or not config.max_off:
        return ()
    going = leaving | {a.host for a in actions}
    staying = [h for h in on if h.name not in going]
    free = sum(h.cores - h.used_cores for h in staying)
    busy = sorted(
        (
            h
            for h in staying
            if h.instances > 0 and not h.pinned and now - h.since >= config.min_dwell
        ),
        key=lambda h: (h.used_cores, -h.cores, h.name),
    )
    chosen: list[str] = []
    moves, moved = 0, 0.0
    for h in busy:
        if len(chosen) >= config.max_off or kept_on - len(chosen) <= config.min_on:
            break
        room = free - (h.cores - h.used_cores)  # free cores left once h is out
        if spare < h.cores or moves + h.instances > config.max_migrations:
            continue
        if moved + h.used_cores > room:
            continue
        chosen.append(h.name)
        spare -= h.cores
        moves += h.instances
        moved += h.used_cores
        free = room
    return tuple(chosen)


def host_views(
    table: HostTable, power: Mapping[str, HostPower], since: Mapping[str, float]
) -> list[HostView]:
    """HostViews from Berth's table and the power states the loop keeps. Cores are the shared
    vCPUs (after the allocation ratio) plus the dedicated CPUs of the cells: a pinned guest
    takes the latter only."""
    cap = table.host_cap[:, H_VCPU] + table.cell_cap[:, :, C_PCPU].sum(axis=1)
    free = table.host_free[:, H_VCPU] + table.cell_free[:, :, C_PCPU].sum(axis=1)
    return [
        HostView(
            name=name,
            cores=float(cap[i]),
            used_cores=float(cap[i] - free[i]),
            instances=int(table.n_instances[i]),
            power=power.get(name, HostPower.ON),
            since=since.get(name, 0.0),
        )
        for i, name in enumerate(table.names)
    ]


def consolidate(
    table: HostTable,
    hosts: Sequence[str],
    scheduler: FilterScheduler,
    *,
    now: float,
    max_migrations: int,
    max_concurrent: int = 1,
    keep_traits: tuple[str, ...] = (),
    seed: int = 0,
) -> Plan | None:
    """Live migrations (Berth's defrag planner, objective empty-hosts) that empty completely
    every host of its `target.drain` — those of `hosts` it can, in their order — and move
    nothing else; None when it can empty none within `max_migrations`.

    A host half emptied saves no power, so each round plans with a budget of exactly the
    instances of the hosts kept, drops the hosts the planner could not empty, and plans again.
    Disabled hosts (powered off, draining) are never targets: the caller's table has them off.
    """
    n = table.n_instances
    chosen = [h for h in dict.fromkeys(hosts) if h in table.index and n[table.index[h]] > 0]
    while chosen:
        count = sum(int(n[table.index[h]]) for h in chosen)
        if count > max_migrations:
            chosen.pop()  # the last is the dearest to empty
            continue
        target = Target(
            objective=Objective.EMPTY_HOSTS, drain=tuple(chosen), keep_traits=keep_traits
        )
        budget = Budget(max_migrations=count, max_concurrent=max_concurrent)
        plan = plan_defrag(table, target, budget, scheduler=scheduler, now=now, seed=seed)
        moved = Counter(m.source for m in plan.moves)
        left = [h for h in chosen if moved[h] < int(n[table.index[h]])]
        if not left:
            return plan if all(m.source in chosen for m in plan.moves) else None
        chosen = [h for h in chosen if h not in left]
    return None
