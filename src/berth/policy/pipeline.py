"""The multi-cloud scheduling pipeline (Ultron's order, seed 000) over the core.

`PolicyEngine.decide(request, now)` changes nothing and returns a `Placement` or an explained
`Failure`; `commit(placement, now)` applies a placement after re-checking everything it relied
on; `schedule` does both and keeps the accounting. The steps, each in its own module:

1. **pre-check** (`precheck`) per IDC and cluster: the image is in the IDC, the flavor is
   offered there, the cluster is enabled and one of its networks has enough free IPs. Each
   rejected cluster keeps its reason.
2. **deployment set** (`deployment_sets`): the set's members plus the request stay within its
   size.
3. **candidates** (`catalogue`): the variants for the business type and user (policy order),
   and for preemptible requests the per-IDC preemptible limit (`precheck`).
4. **placement** (`placing`): for each variant in order, for each candidate cluster, the
   per-host creatable counts in the variant's pool (the core's capacity) and the cluster total;
   clusters that can take the whole request are ordered by the policy (most remaining capacity,
   pack, or topology order) and the core's `select_destinations` runs in that cluster's table
   restricted to the pool (plus the deployment set's host or rack spread).
5. **preemption** (`placing`, on-demand only): when no variant fits anywhere, the least-damage
   eviction plan (`preemption.plan_preemption`) of the first variant, in candidate order, that
   has one; among clusters, the plan with the fewest victims, then least idle capacity, then
   youngest victims.

Committing re-checks and applies (`committing`).
"""

from __future__ import annotations

from berth.core.config import SchedulerConfig, profile
from berth.core.engine import FilterScheduler
from berth.policy.accounting import Accounting
from berth.policy.capacity import CapacityCounter, CapacityReport, capacity_report
from berth.policy.catalogue import Catalogue
from berth.policy.committing import apply, forget_member, recheck
from berth.policy.deployment_sets import decision_group, resolve_set, set_full
from berth.policy.errors import MultiCloudInputError, PolicyConflictError
from berth.policy.model import Business, ClusterSpec, Policy, TopologySpec
from berth.policy.outcome import Committed, Eviction, Failure, Outcome, Placement, ScheduleRequest
from berth.policy.outcome import failure as failure_at
from berth.policy.placing import ClusterPlacer, Job, WhyFactory
from berth.policy.precheck import precheck, within_preemptible_limits
from berth.policy.topology import Cluster, Topology


def build_scheduler(policy: Policy) -> FilterScheduler:
    config: SchedulerConfig = policy.placement.scheduler or profile(policy.placement.profile)
    return FilterScheduler.from_config(config)


class PolicyEngine:
    """The multi-cloud scheduler: topology, catalogue, rules, accounting."""

    def __init__(
        self,
        policy: Policy,
        topology: TopologySpec | None = None,
        *,
        scheduler: FilterScheduler | None = None,
    ) -> None:
        self.policy = policy
        self.catalogue = Catalogue(policy)
        self.scheduler = scheduler if scheduler is not None else build_scheduler(policy)
        self.topology = (
            Topology.build(topology, self.catalogue)
            if topology is not None
            else Topology(self.catalogue)
        )
        self.counter = CapacityCounter(self.scheduler, self.catalogue)
        self.accounting = Accounting()
        self.evictions: list[Eviction] = []
        self._seq = max(
            (
                int(iid[3:10])
                for c in self.topology.clusters.values()
                for iid in c.table.allocations
                if iid.startswith("vm-") and iid[3:10].isdigit()
            ),
            default=0,
        )

    # ------------------------------------------------------------------ topology changes
    def add_cluster(self, idc: str, spec: ClusterSpec) -> Cluster:
        return self.topology.add_cluster(idc, spec)

    def remove_cluster(self, name: str) -> Cluster:
        cluster = self.topology.remove_cluster(name)
        self.counter.forget(cluster)
        return cluster

    # ------------------------------------------------------------------ deciding
    def decide(
        self, request: ScheduleRequest, now: float, why: WhyFactory | None = None
    ) -> Outcome:
        """Where the request goes, or why it cannot; no state changes. `why` makes the hook of
        each cluster's try (`berth.policy.placing.WhyFactory`, docs/why.md)."""
        topo = self.topology
        idcs = topo.idcs_of(request.region)
        base = self.catalogue.base(request.flavor)
        cands = self.catalogue.candidates(base.name, request.business, request.user)
        ids = self._ids(request)

        routes, rejections = precheck(topo, self.catalogue, request, idcs, base.name)
        if not routes:
            return failure_at(request, "precheck", rejections, cands, None)
        ds = resolve_set(topo, self.policy, request)
        full = set_full(ds, request, cands, rejections)
        if full is not None:
            return full
        if not cands.items:
            return Failure(
                request,
                "candidates",
                "no_variant",
                f"no variant of {base.name} ({base.family.value}) for {cands.rule}",
                cands,
                (),
                tuple(rejections),
            )
        if request.business == Business.PREEMPTIBLE:
            routes = within_preemptible_limits(topo, self.policy, request, routes, rejections)
            if not routes:
                return failure_at(request, "preemptible_limit", rejections, cands, None)

        placer = ClusterPlacer(self.policy, self.catalogue, self.scheduler, self.counter, topo)
        with decision_group(topo, ds):
            return placer.place(Job(request, ids, now, cands, ds, why), routes, rejections)

    def _ids(self, request: ScheduleRequest) -> tuple[str, ...]:
        if request.instance_ids is not None:
            if len(request.instance_ids) != request.count:
                raise MultiCloudInputError("instance_ids: must have count entries")
            return request.instance_ids
        seq = self._seq + 1
        while True:
            ids = tuple(f"vm-{seq:07d}-{i}" for i in range(request.count))
            if not any(self._exists(i) for i in ids):
                return ids
            seq += 1

    def _exists(self, instance_id: str) -> bool:
        return any(instance_id in c.table.allocations for c in self.topology.clusters.values())

    # ------------------------------------------------------------------ committing
    def commit(self, placement: Placement, now: float) -> Committed:
        """Apply a placement after re-checking what it relied on; all or nothing."""
        cluster, ds, victims = recheck(self.topology, self.policy, placement, self._exists)
        evicted = apply(self.topology, cluster, placement, ds, victims, now)
        self.evictions.extend(evicted)
        self._seq += 1
        while self._exists(f"vm-{self._seq + 1:07d}-0"):
            self._seq += 1
        return Committed(placement, tuple(placement.instance_ids), evicted)

    def schedule(self, request: ScheduleRequest, now: float) -> Outcome:
        """Decide, commit on success, and count the outcome."""
        outcome = self.decide(request, now)
        if isinstance(outcome, Failure):
            self.accounting.record(now, request.business.value, False, reason=outcome.code)
            return outcome
        try:
            done = self.commit(outcome, now)
        except PolicyConflictError:
            self.accounting.record(now, request.business.value, False, reason="conflict")
            raise
        self.accounting.record(
            now,
            request.business.value,
            True,
            instances=len(done.instance_ids),
            evictions=len(done.evicted),
        )
        return outcome

    def delete(self, instance_id: str) -> None:
        """An instance ends: its room and its metadata go."""
        for cluster in self.topology.clusters.values():
            alloc = cluster.table.allocations.get(instance_id)
            if alloc is None:
                continue
            cluster.table.release(instance_id)
            forget_member(self.topology, cluster, instance_id, alloc.host)
            return
        raise MultiCloudInputError(f"unknown instance {instance_id!r}")

    # ------------------------------------------------------------------ capacity
    def capacity(self, now: float, flavors: list[str] | None = None) -> CapacityReport:
        return capacity_report(self.topology, self.counter, now, flavors)
