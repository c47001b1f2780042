"""Periodic defragmentation in a replay (MISSION B10, issue 6): a policy option.

Every `interval` seconds of virtual time (from the window start) the action plans live
migrations with the core's planner (`berth.core.defrag.plan_defrag`, objective *capacity* of the
target flavors: by default the large flavors the replay tracks for fragmentation) under a
budget of a share of the VMs running at that instant, and applies the plan at once with
`apply_moves` (wave by wave, every intermediate state valid). Each run is recorded in the
replay's `periodic_log` (time, running VMs, budget, migrations, target capacity before and
after), which the report turns into migrations per window.

Migrations take no virtual time here: the plan is applied at the instant it is made, so the
replay measures what the moves buy (acceptance of later requests), not how long they take.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from berth.core.defrag import Budget, Objective, Target, apply_moves, plan_defrag
from berth.core.errors import BerthError
from berth.sim.types import ReplayState

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DefragOptionError(BerthError):
    """A bad --defrag-* value (the message names the option)."""


def parse_interval(text: str, option: str = "--defrag-every") -> float:
    """Seconds from '3600', '90s', '30m', '12h', '1d', '0.5d'."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", text)
    if m is None:
        raise DefragOptionError(
            f"{option}: {text!r} is not a duration (a number with s, m, h or d, e.g. 12h)"
        )
    seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise DefragOptionError(f"{option}: the interval must be positive, got {text!r}")
    return seconds


def parse_budget(text: str, option: str = "--defrag-budget") -> tuple[float | None, int | None]:
    """'3%' -> (0.03, None): a share of the running VMs per run; '50' -> (None, 50)."""
    t = text.strip()
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100.0
            if not 0.0 < share <= 1.0:
                raise ValueError
            return share, None
        count = int(t)
        if count < 1:
            raise ValueError
        return None, count
    except ValueError:
        raise DefragOptionError(
            f"{option}: {text!r} is neither a share of the running VMs in (0%, 100%] "
            "nor a positive number of migrations"
        ) from None


@dataclass
class PeriodicDefrag:
    """The replay's periodic action: plan and apply a defragmentation every `interval` s."""

    interval: float
    share: float | None = 0.03
    """Budget per run as a share of the VMs running then (floor; 3 % is issue 6's target)."""
    migrations: int | None = None
    """Budget per run as a number of migrations; when given, `share` is not used."""
    max_per_host: int | None = None
    max_concurrent: int = 1
    flavors: tuple[str, ...] = ()
    """Target flavors; empty = the replay's tracked large flavors."""
    name: str = "defrag"
    on_pressure: bool = False
    """Run only when some request found no room since the last run (`ReplayState.pressure`):
    a fleet that turns nothing away is left alone."""

    def __post_init__(self) -> None:
        if not (self.interval > 0 and math.isfinite(self.interval)):
            raise DefragOptionError(f"interval: must be positive, got {self.interval}")
        if self.share is None and self.migrations is None:
            raise DefragOptionError("budget: give a share of the running VMs or migrations")

    def budget(self, running: int) -> int:
        if self.migrations is not None:
            return self.migrations
        assert self.share is not None
        return int(running * self.share)

    def __call__(self, state: ReplayState, now: float) -> int:
        table = state.table
        running = len(table.allocations)
        allowed = self.budget(running)
        flavors = self.flavors or tuple(state.tracked)
        record: dict[str, object] = {
            "action": self.name,
            "time": now,
            "running": running,
            "budget": allowed,
            "migrations": 0,
        }
        if self.on_pressure:
            seen = state.pressure_seen.get(self.name, 0)
            state.pressure_seen[self.name] = state.pressure
            if state.pressure == seen:
                record["skipped"] = "no pressure"
                state.log.append(record)
                return 0
        if allowed < 1 or not flavors or running == 0:
            state.log.append(record)
            return 0
        target = Target(objective=Objective.CAPACITY, flavors=flavors)
        budget = Budget(
            max_migrations=allowed,
            max_per_host=self.max_per_host,
            max_concurrent=self.max_concurrent,
        )
        # a seed per run, from the replay's seed and the run's instant: deterministic
        seed = (state.seed * 1_000_003 + int(now)) % (2**62)
        plan = plan_defrag(
            table, target, budget, scheduler=state.scheduler, now=state.now, seed=seed
        )
        apply_moves(table, plan.moves)
        for move in plan.moves:
            state.moved(move.instance_id, move.source, move.target)
        record.update(
            migrations=len(plan.moves),
            capacity_before=dict(plan.before.capacity),
            capacity_after=dict(plan.after.capacity),
        )
        state.log.append(record)
        return len(plan.moves)
