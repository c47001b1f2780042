"""The eviction step of a replay, pluggable.

When a regular (non-preemptible) request fits nowhere, the replay asks an `Evictor` for a plan:
preemptible instances to release first, and a decision valid once they are gone. The default
evictor is the policy layer's `berth.policy.preemption.plan_preemption` (MISSION B7: fewest
victims, least leftover), loaded when that module is installed; without it a replay runs with
no preemption and says so in its report. Tests and experiments can pass their own evictor.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from berth.core.engine import Decision, FilterScheduler
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable


@dataclass(frozen=True)
class EvictionPlan:
    evictions: tuple[str, ...]
    """Instance ids to release, in order, before committing `decision`."""
    decision: Decision


@dataclass(frozen=True)
class Victims:
    """What the replay knows about evictable instances."""

    preemptible: Callable[[Allocation], bool]
    created_at: Callable[[Allocation], float]
    by_host: Mapping[str, Collection[str]]
    """Host name -> ids of the preemptible instances running there (kept by the replay)."""


class Evictor(Protocol):
    name: str

    def __call__(
        self,
        scheduler: FilterScheduler,
        table: HostTable,
        request: RequestSpec,
        now: float,
        victims: Victims,
    ) -> EvictionPlan | None: ...


class PolicyEvictor:
    """Adapter to `berth.policy.preemption.plan_preemption` (the table is not changed)."""

    name = "berth.policy.preemption"

    def __init__(self, plan: Callable[..., Any]) -> None:
        self._plan = plan
        self._candidates = "candidates" in inspect.signature(plan).parameters

    def __call__(
        self,
        scheduler: FilterScheduler,
        table: HostTable,
        request: RequestSpec,
        now: float,
        victims: Victims,
    ) -> EvictionPlan | None:
        kwargs: dict[str, Any] = {}
        if self._candidates:
            kwargs["candidates"] = victims.by_host
        plan = self._plan(
            scheduler, table, request, now, victims.preemptible, victims.created_at, **kwargs
        )
        if plan is None:
            return None
        return EvictionPlan(tuple(plan.evictions), plan.decision)


def default_evictor() -> Evictor | None:
    """The policy layer's preemption planner, or None when it is not installed."""
    try:
        module = importlib.import_module("berth.policy.preemption")
    except ImportError:
        return None
    plan = getattr(module, "plan_preemption", None)
    return PolicyEvictor(plan) if callable(plan) else None
