"""Preemption: the eviction set that lets a request fit with the least damage (B7).

`plan_preemption` never changes the table it is given. It answers "which preemptible instances,
released in this order, make this request fit, and where does it then go":

1. If the request fits as it is, the plan has no evictions (hosts that need no eviction win).
2. Otherwise, for one instance, every host that passes the request's non-resource filters and
   would fit the instance if all its preemptible instances were gone is a candidate. On each
   candidate the victims are chosen by the measure, compared lexicographically:

   * fewest victims;
   * then least capacity left idle after placing: over the resources the request consumes (CPU
     and memory columns, per cell summed, host disk and PCI), the host's free amount after the
     evictions and the placement, as a fraction of the host's capacity, summed. It prefers the
     host where the freed room is used, not stranded;
   * then the youngest victims: least total run time lost, sum of (now - created_at);
   * then table row order and victim order (deterministic).

   Search: **exact** on hosts with at most `exact_limit` preemptible instances, and on larger
   hosts at each victim count k while C(victims, k) <= `subset_budget` (every k-subset, in
   increasing k, vectorised: subsets become rows of one `vector.count` call, so the core's
   NUMA-exact capacity model decides fit); past the budget a **bounded heuristic**: multi-start
   greedy (deficit coverage, cell 0 first, cell 1 first, smallest first) until it fits, then
   removals and 1-for-1 / 2-for-1 exchanges while the measure improves (at most `rounds`
   passes). A lower bound on the victims each host needs (per resource, the largest victims
   first) skips hosts until k reaches it.
3. The best candidate is verified with the real scheduler: the victims are released on a copy
   of the table and `select_destinations` runs restricted to that host. Filters the resource
   model does not see (server groups, instances per host, user plugins) are thus checked too; a
   candidate that fails is dropped and the next is tried (at most `max_verifications`).
4. A request for N instances is planned instance by instance on a working copy: each instance
   goes where it fits without eviction if it can, else where the least-damage eviction lets it.
   This greedy step is exact per instance, not jointly over the N (documented in docs/policy.md).

The returned `PreemptionPlan.decision` is valid on the table AFTER releasing `evictions` in
order (its generations are those hosts' generations then), so a caller does
``for i in plan.evictions: table.release(i)`` then ``engine.commit(table, plan.decision)``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from berth.core.engine import Decision, FilterScheduler, Selection, commit
from berth.core.explain import NoValidHost
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.policy.eviction_search import Choice, EvictionSearch, Victims

EXACT_LIMIT = 10
"""Hosts with at most this many preemptible instances are searched exactly (2^10 subsets)."""

SUBSET_BUDGET = 4096
"""Hosts with more are still searched exactly at victim counts k while C(victims, k) is at most
this; past it the heuristic takes over for that host."""


@dataclass(frozen=True)
class Victim:
    instance_id: str
    host: str
    flavor: str
    created_at: float | None


@dataclass(frozen=True)
class PreemptionPlan:
    """Evictions to carry out, in order, and the decision valid once they are done."""

    evictions: tuple[str, ...]
    decision: Decision
    host: str
    """The host the evictions free (the first one for a multi-instance request); with no
    evictions, the first selected host."""
    hosts: tuple[str, ...] = ()
    """Every host on which instances are evicted, in eviction order."""
    victims: tuple[Victim, ...] = ()
    idle: float = 0.0
    """Sum over the request's instances placed after evictions of the idle-capacity measure."""
    lost_seconds: float = 0.0
    """Total run time of the victims at `now` (0 when creation times are unknown)."""
    search: str = "none"
    """'none' (no eviction needed), 'exact', 'heuristic', or 'exact+heuristic'."""
    evictions_by_host: dict[str, tuple[str, ...]] = field(default_factory=dict)


def plan_preemption(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    preemptible: Callable[[Allocation], bool],
    created_at: Callable[[Allocation], float] | None = None,
    *,
    exact_limit: int = EXACT_LIMIT,
    subset_budget: int = SUBSET_BUDGET,
    candidates: Mapping[str, Collection[str]] | None = None,
    max_verifications: int = 16,
    rounds: int = 4,
    known_not_to_fit: bool = False,
) -> PreemptionPlan | None:
    """The least-damage plan that makes `request` fit, or None when no eviction set does.

    `preemptible(alloc)` says which instances may be evicted; `created_at(alloc)` gives their
    creation time (ages break ties). `candidates` (host -> instance ids), when the caller keeps
    such an index, saves a scan of every allocation; `preemptible` is still asked of each.
    `known_not_to_fit` skips the first step (the caller has just seen the request fail).
    The table is not changed. Bad requests raise the core's `SpecError` as
    `select_destinations` does.
    """
    if not known_not_to_fit:
        try:
            decision = scheduler.select_destinations(table, request, now)
        except NoValidHost:
            pass
        else:
            return PreemptionPlan(evictions=(), decision=decision, host=decision.hosts[0])

    ids = request.ids()
    protected = set(ids) | set(request.same_host)
    source = Victims(preemptible, candidates, protected)
    if not source.any(table):
        return None

    def lost(alloc: Allocation) -> float:
        return 0.0 if created_at is None else max(0.0, now - created_at(alloc))

    search = EvictionSearch(
        scheduler, now, lost, exact_limit, subset_budget, max_verifications, rounds
    )
    if request.num_instances == 1:
        choice = search.one(table, request, source)
        if choice is None:
            return None
        return _plan(table, request, [choice], choice.decision.selections, created_at)

    # several instances: one at a time on a working copy, evicting only when needed
    work = table.copy()
    choices: list[Choice] = []
    selections: list[Selection] = []
    for i, iid in enumerate(ids):
        sub = request.model_copy(
            update={"num_instances": 1, "instance_ids": (iid,), "seed": request.seed * 7919 + i}
        )
        try:
            step = scheduler.select_destinations(work, sub, now)
        except NoValidHost:
            choice = search.one(work, sub, source)
            if choice is None:
                return None
            for victim in choice.victims:
                work.release(victim.instance_id)
                source.evicted.add(victim.instance_id)
            choices.append(choice)
            step = choice.decision
        commit(work, step)
        selections.extend(step.selections)
    return _plan(table, request, choices, tuple(selections), created_at)


def _plan(
    table: HostTable,
    request: RequestSpec,
    choices: Sequence[Choice],
    selections: tuple[Selection, ...],
    created_at: Callable[[Allocation], float] | None,
) -> PreemptionPlan:
    """Assemble the plan; the decision's generations are read after the releases."""
    victims = [v for c in choices for v in c.victims]
    after = table.copy()
    for v in victims:
        after.release(v.instance_id)
    generations: dict[str, int] = {}
    for sel in selections:
        generations.setdefault(sel.host, int(after.generation[after.row(sel.host)]))
    decision = Decision(request, selections, generations)
    by_host: dict[str, list[str]] = {}
    for v in victims:
        by_host.setdefault(v.host, []).append(v.instance_id)
    kinds = sorted({c.search for c in choices})
    return PreemptionPlan(
        evictions=tuple(v.instance_id for v in victims),
        decision=decision,
        host=victims[0].host if victims else selections[0].host,
        hosts=tuple(by_host),
        victims=tuple(
            Victim(
                v.instance_id,
                v.host,
                v.flavor,
                None if created_at is None else created_at(v),
            )
            for v in victims
        ),
        idle=float(sum(c.idle for c in choices)),
        lost_seconds=float(sum(c.lost for c in choices)),
        search="+".join(kinds) if kinds else "none",
        evictions_by_host={h: tuple(ids) for h, ids in by_host.items()},
    )
