"""The multi-cloud scheduling pipeline (Ultron's order, seed 000) over the core.

`PolicyEngine.decide(request, now)` changes nothing and returns a `Placement` or an explained
`Failure`; `commit(placement, now)` applies a placement after re-checking everything it relied
on; `schedule` does both and keeps the accounting. The steps:

1. **pre-check** per IDC and cluster: the image is in the IDC, the flavor is offered there, the
   cluster is enabled and one of its networks has enough free IPs. Each rejected cluster keeps
   its reason.
2. **deployment set**: the set's members plus the request stay within its size.
3. **candidates**: the variants for the business type and user (policy order), and for
   preemptible requests the per-IDC preemptible limit.
4. **placement**: for each variant in order, for each candidate cluster, the per-host creatable
   counts in the variant's pool (the core's capacity) and the cluster total; clusters that can
   take the whole request are ordered by the policy (most remaining capacity, pack, or topology
   order) and the core's `select_destinations` runs in that cluster's table restricted to the
   pool (plus the deployment set's host or rack spread).
5. **preemption** (on-demand only): when no variant fits anywhere, the least-damage eviction plan
   (`preemption.plan_preemption`) of the first variant, in candidate order, that has one; among
   clusters, the plan with the fewest victims, then least idle capacity, then youngest victims.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from berth.core.config import SchedulerConfig, profile
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.errors import ClaimError, StaleGenerationError
from berth.core.explain import Diagnosis, NoValidHost
from berth.core.filters.rack_anti_affinity import RackAntiAffinityFilter, RackAntiAffinityParams
from berth.core.model import Name
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.policy.accounting import Accounting
from berth.policy.capacity import CapacityCounter, CapacityReport, capacity_report
from berth.policy.catalogue import Candidate, Candidates, Catalogue
from berth.policy.errors import MultiCloudInputError, PolicyConflictError
from berth.policy.model import (
    Business,
    ClusterChoice,
    ClusterSpec,
    DeploymentScope,
    DeploymentSetSpec,
    Policy,
    TopologySpec,
)
from berth.policy.preemption import PreemptionPlan, plan_preemption
from berth.policy.restrict import restricted
from berth.policy.topology import (
    Cluster,
    DeploymentSet,
    InstanceMeta,
    Topology,
    anti_affinity_group,
)


class ScheduleRequest(BaseModel):
    """A user's request: N instances of a base flavor in a region, for a business type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: Name = Field(description="a region, or one IDC by name")
    flavor: Name = Field(description="a base flavor of the catalogue (e.g. v.c3.large)")
    count: Annotated[int, Field(ge=1, le=1000)] = 1
    business: Business = Business.ON_DEMAND
    user: Name = "default"
    deployment_set: Name | None = None
    image: Name | None = None
    network: Name | None = None
    project: Name = "default"
    seed: int = 0
    instance_ids: tuple[Name, ...] | None = None


@dataclass(frozen=True)
class ClusterRejection:
    cluster: str
    idc: str
    step: str
    code: str
    message: str


@dataclass(frozen=True)
class Attempt:
    """One (variant, cluster) considered by the placement or preemption step."""

    variant: str
    flavor: str
    pool: str
    cluster: str
    pool_hosts: int
    capacity: int
    """Instances of the flavor the cluster's pool can still take (per the core's capacity, and
    at most one per host, or per rack, for a deployment set)."""
    outcome: str
    message: str = ""
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class Placement:
    request: ScheduleRequest
    region: str
    idc: str
    cluster: str
    pool: str
    variant: str
    flavor: str
    network: str | None
    decision: Decision
    candidates: Candidates
    plan: PreemptionPlan | None = None
    attempts: tuple[Attempt, ...] = ()
    rejections: tuple[ClusterRejection, ...] = ()

    @property
    def ok(self) -> bool:
        return True

    @property
    def hosts(self) -> list[str]:
        return self.decision.hosts

    @property
    def instance_ids(self) -> list[str]:
        return [s.instance_id for s in self.decision.selections]

    @property
    def evictions(self) -> tuple[str, ...]:
        return self.plan.evictions if self.plan is not None else ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": True,
            "region": self.region,
            "idc": self.idc,
            "cluster": self.cluster,
            "pool": self.pool,
            "variant": self.variant,
            "flavor": self.flavor,
            "network": self.network,
            "candidates": [c.variant for c in self.candidates.items],
            "candidate_rule": self.candidates.rule,
            "instances": [
                {"id": s.instance_id, "host": s.host, "alternates": list(s.alternates)}
                for s in self.decision.selections
            ],
            "evictions": [],
        }
        if self.plan is not None:
            out["evictions"] = [
                {
                    "id": v.instance_id,
                    "host": v.host,
                    "flavor": v.flavor,
                    "created_at": v.created_at,
                }
                for v in self.plan.victims
            ]
            out["preemption"] = {
                "search": self.plan.search,
                "idle": self.plan.idle,
                "lost_seconds": self.plan.lost_seconds,
            }
        out["attempts"] = [_attempt_dict(a) for a in self.attempts]
        out["rejections"] = [_rejection_dict(r) for r in self.rejections]
        return out


@dataclass(frozen=True)
class Failure:
    request: ScheduleRequest
    step: str
    code: str
    message: str
    candidates: Candidates | None = None
    attempts: tuple[Attempt, ...] = ()
    rejections: tuple[ClusterRejection, ...] = ()

    @property
    def ok(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": False,
            "step": self.step,
            "code": self.code,
            "message": self.message,
            "candidates": [c.variant for c in self.candidates.items] if self.candidates else [],
            "attempts": [_attempt_dict(a) for a in self.attempts],
            "rejections": [_rejection_dict(r) for r in self.rejections],
        }


@dataclass(frozen=True)
class Eviction:
    instance_id: str
    cluster: str
    host: str
    flavor: str
    user: str
    for_request: tuple[str, ...]


@dataclass(frozen=True)
class Committed:
    placement: Placement
    instance_ids: tuple[str, ...]
    evicted: tuple[Eviction, ...] = field(default=())


Outcome = Placement | Failure


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
    def decide(self, request: ScheduleRequest, now: float) -> Outcome:
        """Where the request goes, or why it cannot; no state changes."""
        topo = self.topology
        idcs = topo.idcs_of(request.region)
        base = self.catalogue.base(request.flavor)
        cands = self.catalogue.candidates(base.name, request.business, request.user)
        ids = self._ids(request)

        # 1. pre-check: image, flavor offered, cluster enabled, free IPs
        rejections: list[ClusterRejection] = []
        clusters: list[tuple[Cluster, str | None]] = []
        for idc in idcs:
            idc_reason = None
            if request.image is not None and request.image not in idc.images:
                idc_reason = ("image_missing", f"image {request.image} is not in IDC {idc.name}")
            elif not self.catalogue.offered(base.name, idc.offered):
                idc_reason = (
                    "flavor_not_offered",
                    f"flavor {base.name} is not offered in IDC {idc.name}",
                )
            for cluster in topo.clusters_of(idc.name):
                if idc_reason is not None:
                    code, msg = idc_reason
                elif not cluster.enabled:
                    code, msg = "cluster_disabled", "cluster is disabled"
                else:
                    code, msg, net = self._network(cluster, request)
                    if not code:
                        clusters.append((cluster, net))
                        continue
                rejections.append(ClusterRejection(cluster.name, idc.name, "precheck", code, msg))
        if not clusters:
            return self._fail(request, "precheck", rejections, cands, None)

        # 2. deployment set
        ds = self._deployment_set(request)
        if ds is not None and len(ds.members) + request.count > ds.max_size:
            return Failure(
                request,
                "deployment_set",
                "deployment_set_full",
                f"deployment set {ds.name} has {len(ds.members)} members; "
                f"{request.count} more would exceed its maximum of {ds.max_size}",
                cands,
                (),
                tuple(rejections),
            )

        # 3. candidate variants and the preemptible limit
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
            kept = []
            for cluster, net in clusters:
                limit = self._preemptible_limit(cluster.idc)
                if limit is None:
                    kept.append((cluster, net))
                    continue
                current = topo.preemptible_count(cluster.idc)
                if current + request.count > limit:
                    rejections.append(
                        ClusterRejection(
                            cluster.name,
                            cluster.idc,
                            "preemptible_limit",
                            "preemptible_limit",
                            f"IDC {cluster.idc} runs {current} preemptible instances, limit "
                            f"{limit}"
                            + (
                                ""
                                if current >= limit
                                else f"; {request.count} more would exceed it"
                            ),
                        )
                    )
                else:
                    kept.append((cluster, net))
            clusters = kept
            if not clusters:
                return self._fail(request, "preemptible_limit", rejections, cands, None)

        # 4. placement, 5. preemption
        with self._group(ds):
            return self._place(request, ids, now, cands, clusters, ds, rejections)

    def _place(
        self,
        request: ScheduleRequest,
        ids: tuple[str, ...],
        now: float,
        cands: Candidates,
        clusters: list[tuple[Cluster, str | None]],
        ds: DeploymentSet | None,
        rejections: list[ClusterRejection],
    ) -> Outcome:
        attempts: list[Attempt] = []
        live = {c.name: self.counter.live(c, now) for c, _ in clusters}
        short: list[tuple[int, Candidate, Cluster]] = []  # attempts to explain on failure
        for cand in cands.items:
            sized = []
            for cluster, net in clusters:
                counts, pool_hosts = self._creatable(cluster, cand, now, live[cluster.name], ds)
                total = int(counts.sum())
                sized.append((cluster, net, total, pool_hosts))
                if total < request.count:
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
                            f"{total} of {request.count} fit in pool {cand.pool}",
                        )
                    )
            for cluster, net, total, pool_hosts in self._order(sized, request.count):
                core_request = self._core_request(request, cand, ids, ds)
                sched = self._scheduler_for(cluster, cand, ds)
                try:
                    decision = sched.select_destinations(cluster.table, core_request, now)
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
                        cand.variant,
                        cand.flavor,
                        cand.pool,
                        cluster.name,
                        pool_hosts,
                        total,
                        "placed",
                    )
                )
                return Placement(
                    request,
                    cluster.region,
                    cluster.idc,
                    cluster.name,
                    cand.pool,
                    cand.variant,
                    cand.flavor,
                    net,
                    decision,
                    cands,
                    None,
                    tuple(attempts),
                    tuple(rejections),
                )

        if cands.may_preempt:
            found = self._preempt(request, ids, now, cands, clusters, ds, attempts)
            if found is not None:
                found = Placement(
                    found.request,
                    found.region,
                    found.idc,
                    found.cluster,
                    found.pool,
                    found.variant,
                    found.flavor,
                    found.network,
                    found.decision,
                    found.candidates,
                    found.plan,
                    tuple(attempts),
                    tuple(rejections),
                )
                return found
        # a failure: the core explains each cluster that was short
        for i, cand, cluster in short:
            a = attempts[i]
            diagnosis, message = self._explain(cluster, cand, request, ids, ds, now, a.capacity)
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

        step = "preemption" if cands.may_preempt else "placement"
        return self._fail(request, step, rejections, cands, attempts)

    def _preempt(
        self,
        request: ScheduleRequest,
        ids: tuple[str, ...],
        now: float,
        cands: Candidates,
        clusters: list[tuple[Cluster, str | None]],
        ds: DeploymentSet | None,
        attempts: list[Attempt],
    ) -> Placement | None:
        limit = self.policy.placement.preemption_exact_limit
        for cand in cands.items:
            best: tuple[tuple[int, float, float, int], Placement] | None = None
            for order, (cluster, net) in enumerate(clusters):
                if not self._has_victims(cluster, cand.pool):
                    continue
                core_request = self._core_request(request, cand, ids, ds)
                plan = plan_preemption(
                    self._scheduler_for(cluster, cand, ds),
                    cluster.table,
                    core_request,
                    now,
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
                    placement = Placement(
                        request,
                        cluster.region,
                        cluster.idc,
                        cluster.name,
                        cand.pool,
                        cand.variant,
                        cand.flavor,
                        net,
                        plan.decision,
                        cands,
                        plan,
                    )
                    best = (key, placement)
            if best is not None:
                return best[1]
        return None

    # ------------------------------------------------------------------ helpers
    def _has_victims(self, cluster: Cluster, pool: str) -> bool:
        """Whether any host of the pool runs a preemptible instance."""
        if not cluster.preemptible_by_host:
            return False
        table = cluster.table
        members = cluster.pool_mask(self._traits(pool))
        return any(members[table.index[h]] for h in cluster.preemptible_by_host)

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

    def _network(self, cluster: Cluster, request: ScheduleRequest) -> tuple[str, str, str | None]:
        """('', '', network) when a network has the IPs, else (code, message, None)."""
        if request.network is not None:
            free = cluster.networks.get(request.network)
            if free is None:
                return "network_missing", f"no network {request.network}", None
            if free < request.count:
                return (
                    "insufficient_ips",
                    f"network {request.network} has {free} free IPs, need {request.count}",
                    None,
                )
            return "", "", request.network
        if not cluster.networks:
            return "insufficient_ips", "cluster has no networks", None
        name, free = max(cluster.networks.items(), key=lambda kv: (kv[1], kv[0]))
        if free < request.count:
            return (
                "insufficient_ips",
                f"most free IPs in one network: {free} ({name}), need {request.count}",
                None,
            )
        return "", "", name

    def _deployment_set(self, request: ScheduleRequest) -> DeploymentSet | None:
        name = request.deployment_set
        if name is None:
            return None
        found = self.topology.sets.get(name)
        if found is not None:
            return found
        defaults = self.policy.deployment_sets
        if not defaults.create_on_use:
            raise MultiCloudInputError(f"--deployment-set: unknown deployment set {name!r}")
        return DeploymentSet(name, defaults.max_size, defaults.scope)

    @contextmanager
    def _group(self, ds: DeploymentSet | None) -> Iterator[None]:
        """A set not created yet gets a server group in each table for the decision only."""
        added: list[HostTable] = []
        if ds is not None:
            for cluster in self.topology.clusters.values():
                if ds.name not in cluster.table.groups:
                    cluster.table.groups[ds.name] = anti_affinity_group(ds.name)
                    added.append(cluster.table)
        try:
            yield
        finally:
            for table in added:
                del table.groups[ds.name]  # type: ignore[union-attr]

    def _preemptible_limit(self, idc: str) -> int | None:
        limits = self.policy.preemptible_limits
        return limits.idcs.get(idc, limits.default)

    def _creatable(
        self,
        cluster: Cluster,
        cand: Candidate,
        now: float,
        live: Any,
        ds: DeploymentSet | None,
    ) -> tuple[Any, int]:
        """Per-host creatable counts of the candidate in its pool, and the pool's size."""
        counts = self.counter.per_host(cluster, cand.flavor, cand.pool, now, live)
        pool_hosts = int(cluster.pool_mask(self._traits(cand.pool)).sum())
        if ds is None:
            return counts, pool_hosts
        table = cluster.table
        counts = np.minimum(counts, 1)
        counts[table.group_count(ds.name) > 0] = 0
        if ds.scope == DeploymentScope.RACK:
            counts[self._used_racks(cluster, ds)] = 0
            # at most one member per rack
            racks = table.rack[counts > 0]
            out = np.zeros_like(counts)
            if racks.size:
                _, first = np.unique(racks, return_index=True)
                out[np.flatnonzero(counts > 0)[first]] = 1
            counts = out
        return counts, pool_hosts

    def _used_racks(self, cluster: Cluster, ds: DeploymentSet) -> Any:
        """Hosts of the cluster whose rack holds a member anywhere in the IDC."""
        table = cluster.table
        racks = self.topology.racks_of_set(ds.name, cluster.idc)
        codes = [table.racks.get(r) for r in racks]
        return np.isin(table.rack, [c for c in codes if c >= 0])

    def _traits(self, pool: str) -> tuple[str, ...]:
        return tuple(self.catalogue.pools[pool].traits)

    def _order(
        self, sized: list[tuple[Cluster, str | None, int, int]], count: int
    ) -> list[tuple[Cluster, str | None, int, int]]:
        fit = [s for s in sized if s[2] >= count]
        choice = self.policy.placement.cluster_choice
        if choice == ClusterChoice.MOST_CAPACITY:
            return sorted(fit, key=lambda s: -s[2])
        if choice == ClusterChoice.PACK:
            return sorted(fit, key=lambda s: s[2])
        return fit

    def _core_request(
        self,
        request: ScheduleRequest,
        cand: Candidate,
        ids: tuple[str, ...],
        ds: DeploymentSet | None,
    ) -> RequestSpec:
        return RequestSpec(
            flavor=cand.flavor,
            num_instances=request.count,
            server_group=ds.name if ds is not None else None,
            project=request.project,
            instance_ids=ids,
            seed=request.seed,
        )

    def _scheduler_for(
        self, cluster: Cluster, cand: Candidate, ds: DeploymentSet | None
    ) -> FilterScheduler:
        """The core scheduler restricted to the pool (and to racks free of the set)."""
        allowed = cluster.pool_mask(self._traits(cand.pool))
        reason = f"not in pool {cand.pool}"
        if ds is not None and ds.scope == DeploymentScope.RACK:
            used = self._used_racks(cluster, ds)
            if used.any():
                allowed = allowed & ~used
                reason = f"not in pool {cand.pool}, or rack holds a member of {ds.name}"
        sched = restricted(self.scheduler, allowed, reason)
        if ds is not None and ds.scope == DeploymentScope.RACK:
            sched.filters.append(RackAntiAffinityFilter(RackAntiAffinityParams(groups=[ds.name])))
        return sched

    def _explain(
        self,
        cluster: Cluster,
        cand: Candidate,
        request: ScheduleRequest,
        ids: tuple[str, ...],
        ds: DeploymentSet | None,
        now: float,
        total: int,
    ) -> tuple[Diagnosis | None, str]:
        message = f"{total} of {request.count} fit in pool {cand.pool}"
        try:
            self._scheduler_for(cluster, cand, ds).select_destinations(
                cluster.table, self._core_request(request, cand, ids, ds), now
            )
        except NoValidHost as exc:
            return exc.diagnosis, f"{message}: {exc}"
        return None, message

    def _fail(
        self,
        request: ScheduleRequest,
        step: str,
        rejections: list[ClusterRejection],
        cands: Candidates | None,
        attempts: list[Attempt] | None,
    ) -> Failure:
        if step in ("precheck", "preemptible_limit"):
            codes = sorted({r.code for r in rejections if r.step == step} or {"no_cluster"})
            code = codes[0] if len(codes) == 1 else "no_candidate_cluster"
            if step == "preemptible_limit":
                code = "preemptible_limit"
            counts: dict[str, int] = {}
            for r in rejections:
                counts[r.code] = counts.get(r.code, 0) + 1
            parts = [f"{n} {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])]
            message = f"0/{len(rejections)} clusters in {request.region} pass: " + ", ".join(parts)
            return Failure(request, step, code, message, cands, (), tuple(rejections))
        tried = attempts or []
        where = ", ".join(
            f"{a.cluster}/{a.variant}: {a.capacity} fit"
            for a in tried
            if a.outcome != "preemption_plan"
        )
        extra = (
            " (no eviction of preemptible instances frees enough room)"
            if step == "preemption"
            else ""
        )
        message = (
            f"no cluster in {request.region} can take {request.count} x {request.flavor}{extra}"
            + (f" [{where}]" if where else "")
        )
        return Failure(
            request, step, "no_capacity", message, cands, tuple(tried), tuple(rejections)
        )

    # ------------------------------------------------------------------ committing
    def commit(self, placement: Placement, now: float) -> Committed:
        """Apply a placement after re-checking what it relied on; all or nothing."""
        topo = self.topology
        cluster = topo.clusters.get(placement.cluster)
        if cluster is None:
            raise PolicyConflictError(f"cluster {placement.cluster} has left")
        table = cluster.table
        request = placement.request
        ids = tuple(placement.instance_ids)
        for iid in ids:
            if self._exists(iid):
                raise PolicyConflictError(f"instance {iid} already exists")
        net = placement.network
        if net is not None and cluster.networks.get(net, 0) < len(ids):
            raise PolicyConflictError(f"network {net} no longer has {len(ids)} free IPs")
        if request.business == Business.PREEMPTIBLE:
            limit = self._preemptible_limit(cluster.idc)
            current = topo.preemptible_count(cluster.idc)
            if limit is not None and current + len(ids) > limit:
                raise PolicyConflictError(
                    f"IDC {cluster.idc} reached its preemptible limit {limit}"
                )
        ds = self._deployment_set(request)
        if ds is not None:
            self._check_set(ds, cluster, placement)
        victims: list[Allocation] = []
        for iid in placement.evictions:
            alloc = table.allocations.get(iid)
            if alloc is None or not cluster.is_preemptible(alloc):
                raise PolicyConflictError(f"victim {iid} is gone or no longer preemptible")
            victims.append(alloc)
        for host, generation in placement.decision.generations.items():
            row = table.row(host)
            expected = int(table.generation[row]) + sum(1 for v in victims if v.host == host)
            if expected != generation:
                raise PolicyConflictError(f"host {host} changed since the decision")

        created = ds is not None and ds.name not in topo.sets
        if ds is not None and created:
            topo.add_deployment_set(
                DeploymentSetSpec(name=ds.name, max_size=ds.max_size, scope=ds.scope)
            )
        before = {v.instance_id: int(table.generation[table.row(v.host)]) for v in victims}
        for v in victims:
            table.release(v.instance_id)
        try:
            commit(table, placement.decision)
        except (StaleGenerationError, ClaimError) as exc:
            _restore(table, victims, before)
            if ds is not None and created:
                topo.remove_deployment_set(ds.name)
            raise PolicyConflictError(str(exc)) from None

        evicted = []
        for v in victims:
            meta = cluster.forget(v.instance_id, v.host)
            if meta is not None and meta.deployment_set is not None:
                found = topo.sets.get(meta.deployment_set)
                if found is not None:
                    found.members.pop(v.instance_id, None)
            evicted.append(
                Eviction(
                    v.instance_id,
                    cluster.name,
                    v.host,
                    v.flavor,
                    meta.user if meta is not None else "unknown",
                    ids,
                )
            )
        for sel in placement.decision.selections:
            cluster.note(
                sel.instance_id,
                sel.host,
                InstanceMeta(request.business, now, request.user, request.deployment_set),
            )
            if ds is not None:
                topo.sets[ds.name].members[sel.instance_id] = cluster.name
        if net is not None:
            cluster.networks[net] -= len(ids)
        self.evictions.extend(evicted)
        self._seq += 1
        while any(self._exists(f"vm-{self._seq + 1:07d}-0") for _ in (0,)):
            self._seq += 1
        return Committed(placement, ids, tuple(evicted))

    def _check_set(self, ds: DeploymentSet, cluster: Cluster, placement: Placement) -> None:
        """The set's rules hold with the placement added (re-checked at commit)."""
        count = len(placement.decision.selections)
        if len(ds.members) + count > ds.max_size:
            raise PolicyConflictError(
                f"deployment set {ds.name} would exceed {ds.max_size} members"
            )
        table = cluster.table
        hosts = placement.hosts
        if len(set(hosts)) != len(hosts):
            raise PolicyConflictError(f"deployment set {ds.name}: two members on one host")
        held = table.group_count(ds.name) if ds.name in table.groups else None
        for host in hosts:
            if held is not None and held[table.row(host)] > 0:
                raise PolicyConflictError(
                    f"deployment set {ds.name} already has a member on {host}"
                )
        if ds.scope == DeploymentScope.RACK:
            racks = [table.racks.words[table.rack[table.row(h)]] for h in hosts]
            used = self.topology.racks_of_set(ds.name, cluster.idc)
            if len(set(racks)) != len(racks) or used & set(racks):
                raise PolicyConflictError(f"deployment set {ds.name}: two members in one rack")

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
            meta = cluster.forget(instance_id, alloc.host)
            if meta is not None and meta.deployment_set is not None:
                found = self.topology.sets.get(meta.deployment_set)
                if found is not None:
                    found.members.pop(instance_id, None)
            return
        raise MultiCloudInputError(f"unknown instance {instance_id!r}")

    # ------------------------------------------------------------------ capacity
    def capacity(self, now: float, flavors: list[str] | None = None) -> CapacityReport:
        return capacity_report(self.topology, self.counter, now, flavors)


def _restore(table: HostTable, victims: list[Allocation], generations: dict[str, int]) -> None:
    """Put released victims back exactly (footprints and generations) after a failed commit."""
    for v in reversed(victims):
        table.claim(
            v.instance_id,
            v.host,
            v.flavor,
            v.cell_use,
            v.host_use,
            server_group=v.server_group,
            project=v.project,
            migratable=v.migratable,
        )
        table.generation[table.row(v.host)] = generations[v.instance_id]


def _attempt_dict(a: Attempt) -> dict[str, Any]:
    out: dict[str, Any] = {
        "variant": a.variant,
        "flavor": a.flavor,
        "pool": a.pool,
        "cluster": a.cluster,
        "pool_hosts": a.pool_hosts,
        "capacity": a.capacity,
        "outcome": a.outcome,
        "message": a.message,
    }
    if a.diagnosis is not None:
        out["diagnosis"] = a.diagnosis.to_dict()
    return out


def _rejection_dict(r: ClusterRejection) -> dict[str, Any]:
    return {
        "cluster": r.cluster,
        "idc": r.idc,
        "step": r.step,
        "code": r.code,
        "message": r.message,
    }
