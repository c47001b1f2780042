"""Pipeline steps 4 and 5: place a request in one cluster's pool, or plan evictions for it.

For each candidate variant in order, each cluster that passed the pre-check is sized (the
core's per-host creatable counts in the variant's pool); the clusters that can take the whole
request are ordered by the policy and the core's `select_destinations` runs in each one's
table, restricted to the pool. When no variant fits anywhere and the request may preempt, the
least-damage eviction plan is searched the same way (docs/policy.md, "The pipeline").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from berth.core.engine import Decision, FilterScheduler, WhyHook
from berth.core.explain import Diagnosis, NoValidHost
from berth.core.filters.rack_anti_affinity import RackAntiAffinityFilter, RackAntiAffinityParams
from berth.core.request import RequestSpec
from berth.core.why import InstanceWhy, WhyRecorder
from berth.policy.capacity import CapacityCounter
from berth.policy.catalogue import Candidate, Candidates, Catalogue
from berth.policy.deployment_sets import one_per_place, used_racks
from berth.policy.model import ClusterChoice, DeploymentScope, Policy
from berth.policy.outcome import (
    Attempt,
    ClusterRejection,
    Outcome,
    Placement,
    ScheduleRequest,
    failure,
)
from berth.policy.precheck import Route
from berth.policy.preemption import PreemptionPlan, plan_preemption
from berth.policy.restrict import restricted
from berth.policy.topology import Cluster, DeploymentSet, Topology

Sized = tuple[Cluster, str | None, int, int]
"""A route with the instances its pool can take and the pool's number of hosts."""

WhyFactory = Callable[[FilterScheduler, RequestSpec], WhyHook]
"""Given the scheduler and core request of one cluster's try, the `why` hook for its
`select_destinations` (`berth.core.why.WhyRecorder`); the last one made explains the placement
unless it evicts (docs/why.md)."""


class WhyRecorders:
    """A `WhyFactory` keeping one `core.why.WhyRecorder` per cluster tried (`top` candidates
    per instance); `explained` picks the one that placed."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.made: list[WhyRecorder] = []

    def __call__(self, scheduler: FilterScheduler, request: RequestSpec) -> WhyHook:
        self.made.append(WhyRecorder(scheduler, request, self.top))
        return self.made[-1]

    def explained(self, placement: Placement) -> list[InstanceWhy] | None:
        """The placement's instances explained: the last cluster tried is the one that placed;
        None when a preemption plan chose the hosts (the least-damage plan, not the weighers)."""
        if placement.plan is not None or not self.made:
            return None
        instances = self.made[-1].instances
        chosen = [(s.instance_id, s.host) for s in placement.decision.selections]
        if [(w.instance_id, w.hosts[0]) for w in instances] != chosen:  # pragma: no cover
            return None
        return instances


@dataclass(frozen=True)
class Job:
    """One request being placed: what every step of the placement reads."""

    request: ScheduleRequest
    ids: tuple[str, ...]
    now: float
    cands: Candidates
    ds: DeploymentSet | None
    why: WhyFactory | None = None
    """Explain the placement's choice (None: nothing is recorded, nothing costs)."""


@dataclass(frozen=True)
class ClusterPlacer:
    """The placement and preemption steps over the engine's current topology and scheduler."""

    policy: Policy
    catalogue: Catalogue
    scheduler: FilterScheduler
    counter: CapacityCounter
    topology: Topology

    def place(self, job: Job, routes: list[Route], rejections: list[ClusterRejection]) -> Outcome:
        """The first variant, in candidate order, that some cluster takes; else a preemption
        plan; else a failure that explains each cluster that was short."""
        attempts: list[Attempt] = []
        live = {c.name: self.counter.live(c, job.now) for c, _ in routes}
        short: list[tuple[int, Candidate, Cluster]] = []  # attempts to explain on failure
        for cand in job.cands.items:
            sized = self._size(job, cand, routes, live, attempts, short)
            placed = self._try_clusters(job, cand, sized, attempts)
            if placed is not None:
                return _explained(placed, attempts, rejections)
        if job.cands.may_preempt:
            found = self._preempt(job, routes, attempts)
            if found is not None:
                return _explained(found, attempts, rejections)
        self._explain_short(job, short, attempts)
        step = "preemption" if job.cands.may_preempt else "placement"
        return failure(job.request, step, rejections, job.cands, attempts)

    def _size(
        self,
        job: Job,
        cand: Candidate,
        routes: list[Route],
        live: dict[str, Any],
        attempts: list[Attempt],
        short: list[tuple[int, Candidate, Cluster]],
    ) -> list[Sized]:
        """Each route with what the variant's pool can take; a short one is an attempt."""
        sized = []
        for cluster, net in routes:
            counts, pool_hosts = self._creatable(cluster, cand, job, live[cluster.name])
            total = int(counts.sum())
            sized.append((cluster, net, total, pool_hosts))
            if total < job.request.count:
                short.append((len(attempts), cand, cluster))
                attempts.append(
                    Attempt(
                        cand.variant,
                        cand.flavor,
                        cand.pool,
                        cluster.name,
                        pool_hosts,
                        total,
                        "insufficient_capacity",
                        f"{total} of {job.request.count} fit in pool {cand.pool}",
                    )
                )
        return sized

    def _try_clusters(
        self, job: Job, cand: Candidate, sized: list[Sized], attempts: list[Attempt]
    ) -> Placement | None:
        """The core's choice in the first cluster, in policy order, that finds hosts."""
        for cluster, net, total, pool_hosts in self._order(sized, job.request.count):
            sched = self._scheduler_for(cluster, cand, job.ds)
            core_request = _core_request(job, cand)
            hook = None if job.why is None else job.why(sched, core_request)
            try:
                decision = sched.select_destinations(cluster.table, core_request, job.now, why=hook)
            except NoValidHost as exc:
                attempts.append(
                    Attempt(
                        cand.variant,
                        cand.flavor,
                        cand.pool,
                        cluster.name,
                        pool_hosts,
                        total,
                        "no_valid_host",
                        str(exc),
                        exc.diagnosis,
                    )
                )
                continue
            attempts.append(
                Attempt(
                    cand.variant, cand.flavor, cand.pool, cluster.name, pool_hosts, total, "placed"
                )
            )
            return _placement(job, cluster, net, cand, decision, None)
        return None

    def _preempt(self, job: Job, routes: list[Route], attempts: list[Attempt]) -> Placement | None:
        """The first variant with an eviction plan; among its clusters, the plan with the
        fewest victims, then least idle capacity, then youngest victims, then route order."""
        limit = self.policy.placement.preemption_exact_limit
        for cand in job.cands.items:
            best: tuple[tuple[int, float, float, int], Placement] | None = None
            for order, (cluster, net) in enumerate(routes):
                if not self._has_victims(cluster, cand.pool):
                    continue
                plan = plan_preemption(
                    self._scheduler_for(cluster, cand, job.ds),
                    cluster.table,
                    _core_request(job, cand),
                    job.now,
                    cluster.is_preemptible,
                    cluster.created_at,
                    candidates=cluster.preemptible_by_host,
                    exact_limit=limit,
                    known_not_to_fit=True,
                )
                outcome = "no_preemption_plan" if plan is None else "preemption_plan"
                message = "" if plan is None else f"evict {len(plan.evictions)}"
                attempts.append(
                    Attempt(
                        cand.variant, cand.flavor, cand.pool, cluster.name, 0, 0, outcome, message
                    )
                )
                if plan is None:
                    continue
                key = (len(plan.evictions), round(plan.idle, 9), round(plan.lost_seconds, 6), order)
                if best is None or key < best[0]:
                    best = (key, _placement(job, cluster, net, cand, plan.decision, plan))
            if best is not None:
                return best[1]
        return None

    def _explain_short(
        self, job: Job, short: list[tuple[int, Candidate, Cluster]], attempts: list[Attempt]
    ) -> None:
        """Add the core's diagnosis to each attempt whose cluster was short."""
        for i, cand, cluster in short:
            a = attempts[i]
            diagnosis, message = self._explain(cluster, cand, job, a.capacity)
            attempts[i] = Attempt(
                a.variant,
                a.flavor,
                a.pool,
                a.cluster,
                a.pool_hosts,
                a.capacity,
                a.outcome,
                message,
                diagnosis,
            )

    def _explain(
        self, cluster: Cluster, cand: Candidate, job: Job, total: int
    ) -> tuple[Diagnosis | None, str]:
        message = f"{total} of {job.request.count} fit in pool {cand.pool}"
        try:
            self._scheduler_for(cluster, cand, job.ds).select_destinations(
                cluster.table, _core_request(job, cand), job.now
            )
        except NoValidHost as exc:
            return exc.diagnosis, f"{message}: {exc}"
        return None, message

    def _has_victims(self, cluster: Cluster, pool: str) -> bool:
        """Whether any host of the pool runs a preemptible instance."""
        if not cluster.preemptible_by_host:
            return False
        table = cluster.table
        members = cluster.pool_mask(self._traits(pool))
        return any(members[table.index[h]] for h in cluster.preemptible_by_host)

    def _creatable(self, cluster: Cluster, cand: Candidate, job: Job, live: Any) -> tuple[Any, int]:
        """Per-host creatable counts of the candidate in its pool, and the pool's size."""
        counts = self.counter.per_host(cluster, cand.flavor, cand.pool, job.now, live)
        pool_hosts = int(cluster.pool_mask(self._traits(cand.pool)).sum())
        if job.ds is None:
            return counts, pool_hosts
        return one_per_place(self.topology, cluster, job.ds, counts), pool_hosts

    def _traits(self, pool: str) -> tuple[str, ...]:
        return tuple(self.catalogue.pools[pool].traits)

    def _order(self, sized: list[Sized], count: int) -> list[Sized]:
        """The clusters that can take the whole request, in the policy's order."""
        fit = [s for s in sized if s[2] >= count]
        choice = self.policy.placement.cluster_choice
        if choice == ClusterChoice.MOST_CAPACITY:
            return sorted(fit, key=lambda s: -s[2])
        if choice == ClusterChoice.PACK:
            return sorted(fit, key=lambda s: s[2])
        return fit

    def _scheduler_for(
        self, cluster: Cluster, cand: Candidate, ds: DeploymentSet | None
    ) -> FilterScheduler:
        """The core scheduler restricted to the pool (and to racks free of the set)."""
        allowed = cluster.pool_mask(self._traits(cand.pool))
        reason = f"not in pool {cand.pool}"
        if ds is not None and ds.scope == DeploymentScope.RACK:
            used = used_racks(self.topology, cluster, ds)
            if used.any():
                allowed = allowed & ~used
                reason = f"not in pool {cand.pool}, or rack holds a member of {ds.name}"
        sched = restricted(self.scheduler, allowed, reason)
        if ds is not None and ds.scope == DeploymentScope.RACK:
            sched.filters.append(RackAntiAffinityFilter(RackAntiAffinityParams(groups=[ds.name])))
        return sched


def _core_request(job: Job, cand: Candidate) -> RequestSpec:
    """The core's request for the job in the candidate's concrete flavor."""
    return RequestSpec(
        flavor=cand.flavor,
        num_instances=job.request.count,
        server_group=job.ds.name if job.ds is not None else None,
        project=job.request.project,
        instance_ids=job.ids,
        seed=job.request.seed,
    )


def _placement(
    job: Job,
    cluster: Cluster,
    net: str | None,
    cand: Candidate,
    decision: Decision,
    plan: PreemptionPlan | None,
) -> Placement:
    return Placement(
        job.request,
        cluster.region,
        cluster.idc,
        cluster.name,
        cand.pool,
        cand.variant,
        cand.flavor,
        net,
        decision,
        job.cands,
        plan,
    )


def _explained(
    placement: Placement, attempts: list[Attempt], rejections: list[ClusterRejection]
) -> Placement:
    """The placement with every attempt and pre-check rejection that led to it."""
    return replace(placement, attempts=tuple(attempts), rejections=tuple(rejections))
