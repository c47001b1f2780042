"""Berth's replayed policy with tidal consolidation (benchmarks/bench_elastic.py).

The replay (`berth.elastic.replay`) has no live migration of its own; this policy adds the
loop's consolidation (docs/elastic.md, "Consolidation in the loop") on top of `BerthPolicy`:
every tidal cycle the busy hosts the plan names (`TidalPlan.empty`) are emptied onto hosts of
the same cluster that stay on and take starts (best fit), all of a host's VMs or none, at most
`max_migrations` moves a plan. Assumption: a live migration of a 4-core batch VM finishes
within the 60 s cycle, so the moves are instant here and the VMs' jobs go on. An emptied host
is draining — not usable, so no start lands there — and the next tidal cycle powers it off
(the planner takes hosts being emptied first) or, when the forecast needs it, puts it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from berth.elastic.policies import BerthPolicy
from berth.elastic.replay import World
from berth.elastic.tidal import TidalPlan


@dataclass
class ConsolidatingPolicy(BerthPolicy):
    migrations: int = 0  # in the measured day
    draining: set[int] = field(default_factory=set)

    def _emptying(self) -> set[int]:
        return self.draining

    def _tidal(self, world: World, now: float) -> TidalPlan | None:
        plan = super()._tidal(world, now)
        if plan is None:
            return None
        for h in sorted(self.draining):  # powered off now, or back into service
            if world.power_on[h]:
                world.usable_at[h] = now
        self.draining.clear()
        if not plan.release and plan.empty:
            self._consolidate(world, plan, now)
        return plan

    def _consolidate(self, world: World, plan: TidalPlan, now: float) -> None:
        assert self.tidal is not None
        chosen = [int(name[1:]) for name in plan.empty]
        target_ok = world.usable(now).copy()
        target_ok[chosen] = False
        free = world.free.copy()
        moves: list[tuple[str, int]] = []
        emptied: list[int] = []
        for h in chosen:
            trial = free.copy()
            mine: list[tuple[str, int]] = []
            same = target_ok & (world.cluster_of == world.cluster_of[h])
            for v in sorted((v for v in world.vms.values() if v.host == h), key=lambda v: v.name):
                need = world.setup.groups[v.group].cores_per_vm
                cand = np.flatnonzero(same & (trial >= need))
                if cand.size == 0:
                    break
                t = int(cand[np.argmin(trial[cand])])
                trial[t] -= need
                mine.append((v.name, t))
            else:
                if len(moves) + len(mine) <= self.tidal.max_migrations:
                    free = trial
                    moves += mine
                    emptied.append(h)
        for name, t in moves:
            v = world.vms[name]
            need = world.setup.groups[v.group].cores_per_vm
            world.free[v.host] += need
            world.vms_on[v.host] -= 1
            world.free[t] -= need
            world.vms_on[t] += 1
            v.host = t
        if now >= world.setup.measure_from:
            self.migrations += len(moves)
        for h in emptied:
            self.draining.add(h)
            world.usable_at[h] = np.inf  # draining: no start lands here
