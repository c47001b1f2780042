"""Tidal power management: power empty hosts off when demand ebbs, back on before it returns.

Pure planner (docs/elastic.md, "tidal"): from the hosts (cores, cores in use, instances, power
state and since when), the recent demand (samples of cores wanted over time) and `now`, it
decides which hosts to power on or off, each with a reason, and how many more hosts it would
like emptied — `consolidate` then asks Berth's defrag planner (objective `empty-hosts`) for the
live migrations that empty them. The loop disables a host before powering it off and enables it
after powering it on; it never powers off a host that holds an instance (the planner refuses to
name one).

Forecast: for each of the last `days` days, the largest demand seen in the window
[now, now + lookahead] shifted back by that many days; the `quantile` of those (1.0 = max),
never below the demand now; times (1 + margin), plus `spare` cores. Capacity on = cores of the
hosts powered on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from berth.cloud.driver import HostPower
from berth.core.defrag import Budget, Objective, Plan, Target, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.resources import H_VCPU
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
    max_off: int = 4  # power-offs per cycle
    max_on: int = 16  # power-ons per cycle

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError("quantile: must be within [0, 1]")
        for name in ("days", "min_on", "max_off", "max_on"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        for name in ("lookahead", "margin", "spare", "min_dwell"):
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
    to_empty: int  # hosts it would power off if they were empty (consolidation wanted)
    notes: tuple[str, ...] = ()


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
    """Which hosts to power on or off now, and how many more it would like emptied."""
    need = forecast(samples, now, current, config)
    on = [h for h in hosts if h.power is HostPower.ON]
    off = [h for h in hosts if h.power is HostPower.OFF]
    cap = sum(h.cores for h in on)
    actions: list[PowerAction] = []
    notes: list[str] = []
    if cap < need:
        ready = sorted(off, key=lambda h: (-h.cores, h.name))
        for h in ready:
            if cap >= need or len(actions) >= config.max_on:
                break
            actions.append(PowerAction(h.name, True, f"forecast {need:g} cores > {cap:g} on"))
            cap += h.cores
        if cap < need:
            notes.append(f"short of the forecast by {need - cap:g} cores")
        return TidalPlan(now, need, cap, tuple(actions), 0, tuple(notes))
    empty = sorted(
        (h for h in on if h.instances == 0 and h.used_cores <= 0),
        key=lambda h: (-h.cores, h.name),
    )
    kept_on = len(on)
    for h in empty:
        if len(actions) >= config.max_off or kept_on <= config.min_on:
            break
        if cap - h.cores < need:
            continue
        if now - h.since < config.min_dwell:
            notes.append(f"{h.name}: on since {h.since:g}, within the dwell time")
            continue
        text = f"empty; {cap - h.cores:g} cores stay on for a forecast of {need:g}"
        actions.append(PowerAction(h.name, False, text))
        cap -= h.cores
        kept_on -= 1
    # how many busy hosts could still go if they were emptied (smallest first)
    busy = sorted((h for h in on if h.instances > 0), key=lambda h: (h.cores, h.name))
    spare, to_empty = cap - need, 0
    for h in busy:
        if kept_on - to_empty <= config.min_on or spare < h.cores:
            break
        spare -= h.cores
        to_empty += 1
    if to_empty:
        notes.append(f"{to_empty} more hosts could power off once emptied (consolidate)")
    return TidalPlan(now, need, cap, tuple(actions), to_empty, tuple(notes))


def host_views(
    table: HostTable, power: Mapping[str, HostPower], since: Mapping[str, float]
) -> list[HostView]:
    """HostViews from Berth's table (vCPUs as cores) and the power states the loop keeps."""
    cap = table.host_cap[:, H_VCPU]
    free = table.host_free[:, H_VCPU]
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
    plan: TidalPlan,
    scheduler: FilterScheduler,
    *,
    max_migrations: int,
    max_concurrent: int = 1,
    keep_traits: tuple[str, ...] = (),
    seed: int = 0,
) -> Plan | None:
    """Live migrations (Berth's defrag planner, objective empty-hosts) that empty hosts the
    tidal plan wants off; None when it wants none. Powered-off hosts are never targets: the
    caller's table has them disabled."""
    if plan.to_empty <= 0 or max_migrations <= 0:
        return None
    target = Target(objective=Objective.EMPTY_HOSTS, keep_traits=keep_traits)
    budget = Budget(max_migrations=max_migrations, max_concurrent=max_concurrent)
    return plan_defrag(table, target, budget, scheduler=scheduler, now=plan.now, seed=seed)
