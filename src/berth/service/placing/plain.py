"""The `/v1/placements` decider: a flavor on the first candidate cluster that fits, else by
preempting preemptible instances (`berth.policy.preemption`).

Candidate clusters are filtered by region, cluster, pool, image and flavor and ordered by
`ServiceConfig.cluster_order`; each gets the core's own request (`_cluster_request`). Hosts this
replica is still committing to are left out of the decision, so concurrent requests of one
replica do not race for the same host; when only such hosts would fit, the decision waits for
those commits.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from berth.core.engine import Decision
from berth.core.errors import SpecError
from berth.core.explain import NoValidHost
from berth.core.request import ImageProps, RequestSpec
from berth.core.why import DEFAULT_TOP, InstanceWhy, WhyRecorder
from berth.service.placing.commit import commit_with_retries
from berth.service.placing.decider import Attempt, Plan
from berth.service.placing.errors import BadRequestError, NoPlacementError
from berth.service.replica import ClusterView, Replica
from berth.store.footprint import to_named
from berth.store.repo import (
    CommitResult,
    GroupRow,
    HostCapacity,
    NewInstance,
    Outcome,
    instance_set_key,
)

try:  # the policy layer (docs/policy.md) may be left out of a trimmed install
    from berth.policy.preemption import plan_preemption
except ImportError:  # pragma: no cover - depends on the checkout
    plan_preemption = None  # type: ignore[assignment]


PREEMPTIBLE_TYPES = frozenset({"preemptible", "elastic"})
"""Business types whose instances on-demand requests may evict and which never evict others:
preemptible users, and the elastic pools' worker VMs (docs/elastic.md, "control loop")."""


def is_preemptible(business_type: str) -> bool:
    return business_type in PREEMPTIBLE_TYPES


@dataclass(frozen=True)
class PlaceArgs:
    flavor: str
    count: int
    project: str
    region: str | None = None
    cluster: str | None = None
    pool: str | None = None
    availability_zone: str | None = None
    image: dict[str, Any] | None = None
    deployment_set: str | None = None
    same_host: tuple[str, ...] = ()
    different_host: tuple[str, ...] = ()
    business_type: str = "on-demand"
    seed: int | None = None
    network: str | None = None
    """Take one IP per instance from this network (its cluster is then the only candidate)."""
    why: int = 0
    """Explain the choice, showing this many candidates per instance (`core.why`; 0: no)."""

    @property
    def set_key(self) -> str | None:
        """The key of the deployment set named (sets are per project), or None."""
        return instance_set_key(self.project, self.deployment_set)


@dataclass
class Placed:
    placement_id: str
    cluster: str
    decision: Decision
    evicted: list[str]
    commit: CommitResult
    decision_ms: float
    attempts: int
    response: dict[str, Any] | None = None
    why: list[dict[str, Any]] | None = None
    """With `PlaceArgs.why`: each instance's `core.why.InstanceWhy` as JSON data (None when
    the placement evicted: the least-damage plan chose the host, not the weighers)."""


@dataclass
class Choice:
    """The cluster and decision a placement chose, and the instances it evicts."""

    cluster: ClusterView
    decision: Decision
    evictions: tuple[str, ...] = ()
    why: list[InstanceWhy] | None = None
    """Each instance explained, when asked (`PlaceArgs.why`) or recorded for every decision
    (`ServiceConfig.why_all`); None when the placement evicted."""


def place(
    replica: Replica,
    args: PlaceArgs,
    *,
    idempotency: tuple[str, str, str] | None = None,
    response: Callable[[Placed], dict[str, Any]] | None = None,
) -> Placed:
    """Decide and commit, retrying on conflicts; raise `NoPlacementError` or `ContentionError`.

    `idempotency` is (principal, key, request hash): the response built by `response` is
    stored in the same transaction as the claim.
    """
    return commit_with_retries(
        replica,
        PlainDecider(),
        args,
        guard=replica.group_lock(args.set_key),
        idempotency=idempotency,
        response=response,
        on_commit=replica.on_commit,
        gave_up="attempts lost to concurrent writers",
    )


def record_failure(
    replica: Replica, args: PlaceArgs, reason: str, started: float, message: str | None = None
) -> None:
    """Record a failed placement in the outcome log, with its explanation (`message`)."""
    replica.store.record_outcome(
        Outcome(
            "failure",
            reason,
            args.flavor,
            args.project,
            args.count,
            (time.perf_counter() - started) * 1e3,
            args.business_type,
            message,
        )
    )


_FINAL = ("deployment_set_full", "deployment_set_affinity", "no_candidate_cluster")
"""Failures that no commit in flight can change: decided at once, without waiting."""


class PlainDecider:
    """Chooses for `/v1/placements` (a `berth.service.placing.decider.Decider`)."""

    def decide(self, views: Replica, request: PlaceArgs, attempt: Attempt) -> Plan[Placed]:
        """Decide on the cache, leaving out the hosts with a commit in flight; when only such
        hosts would fit, wait for their commits and decide again."""
        args = request
        for _ in range(100):
            if views.needs_reload:
                views.reload_locked()
            busy = views.held()
            t0 = time.perf_counter()
            try:
                choice = choose(views, args, busy)
            except NoPlacementError as exc:
                if not busy or exc.reason in _FINAL:
                    raise
                # maybe only hosts with a commit in flight fit: wait for those commits
                views.wait_for_commits(busy, 5.0)
                continue
            break
        else:  # pragma: no cover - a hundred rounds of waiting: decide on the full view
            choice = choose(views, args, frozenset())
        decision_ms = (time.perf_counter() - t0) * 1e3
        if views.on_decision is not None:
            views.on_decision(decision_ms / 1e3)
        new, host_gens, group_gens, caps = _claims(views, args, choice)
        placed = Placed(
            attempt.placement_id,
            choice.cluster.name,
            choice.decision,
            list(choice.evictions),
            CommitResult(),
            decision_ms,
            attempt.number,
            why=None if not args.why or choice.why is None else [w.to_dict() for w in choice.why],
        )
        return Plan(
            placed,
            new,
            host_gens,
            group_gens,
            caps,
            args.flavor,
            args.project,
            args.count,
            evictions=choice.evictions,
            why=choice.why,
        )


def explain_top(views: Replica, asked: int) -> int:
    """Candidates to explain per instance: as asked, else `DEFAULT_TOP` when the replica
    records why for every decision (`ServiceConfig.why_all`), else 0 (nothing recorded)."""
    return asked or (DEFAULT_TOP if views.config.why_all else 0)


def choose(views: Replica, args: PlaceArgs, busy: frozenset[str] = frozenset()) -> Choice:
    """The first candidate cluster's decision, else a preemption (caller holds the lock)."""
    if args.flavor not in views.flavors:
        raise BadRequestError("flavor", f"unknown flavor {args.flavor!r}", "unknown_flavor")
    if args.set_key is not None:
        group = views.groups.get(args.set_key)
        if group is None:  # another project's set of that id is not one of this project's
            raise BadRequestError(
                "deployment_set",
                f"unknown deployment set {args.deployment_set!r} in project {args.project!r}",
                "unknown_deployment_set",
            )
        if group.max_size is not None:
            members = sum(
                sum(v.table.group_rows.get(group.key, {}).values()) for v in views.clusters.values()
            )
            if members + args.count > group.max_size:
                raise NoPlacementError(
                    f"deployment set {group.id} holds {members} of at most "
                    f"{group.max_size} members",
                    "deployment_set_full",
                    {"members": members, "max_size": group.max_size},
                )
        args = _affinity_home(views, args, group)
    clusters, rejected = _candidates(views, args)
    seed = args.seed if args.seed is not None else secrets.randbits(31)
    ids = tuple(f"i-{secrets.token_hex(8)}" for _ in range(args.count))
    diagnoses: dict[str, Any] = {}
    now = views.clock()
    top = explain_top(views, args.why)
    for view in clusters:
        request = _cluster_request(view, args, ids, seed, busy)
        try:
            if top:
                recorder = WhyRecorder(views.scheduler, request, top)
                decision = views.scheduler.select_destinations(
                    view.table, request, now, why=recorder
                )
                return Choice(view, decision, why=recorder.instances)
            return Choice(view, views.scheduler.select_destinations(view.table, request, now))
        except NoValidHost as exc:
            diagnoses[view.name] = exc.diagnosis.to_dict()
        except SpecError as exc:
            raise BadRequestError("request", str(exc)) from None
    # never evict while a host this replica is committing to might turn out to fit
    if views.config.preemption and not is_preemptible(args.business_type) and not busy:
        plan = _preempt(views, clusters, args, ids, seed, now, busy)
        if plan is not None:
            return plan
    if not clusters:
        raise NoPlacementError(
            "no candidate cluster: "
            + ("; ".join(f"{c}: {why}" for c, why in sorted(rejected.items())) or "none"),
            "no_candidate_cluster",
            {"rejected_clusters": rejected, "clusters": {}},
        )
    message = "; ".join(f"{c}: {d['message']}" for c, d in diagnoses.items())
    first = next(iter(diagnoses.values()))
    reason = first["reasons"][0]["code"] if first["reasons"] else "no_valid_host"
    raise NoPlacementError(
        message,
        reason,
        {"rejected_clusters": rejected, "clusters": diagnoses},
    )


def _affinity_home(views: Replica, args: PlaceArgs, group: GroupRow) -> PlaceArgs:
    """An affinity set's members share one host, whichever cluster a request names: once the
    set has members, their cluster is the only candidate (in it the core's affinity filter
    keeps them on their host); a request naming another cluster is refused. Each cluster's
    table knows only its own members, hence the look across clusters here; the commit
    re-checks the rule against the rows (`berth.store.claims`)."""
    if group.policy != "affinity":
        return args
    homes = {
        name: sorted(view.table.names[row] for row in rows)
        for name, view in sorted(views.clusters.items())
        if (rows := view.table.group_rows.get(group.key))
    }
    if not homes or args.cluster in homes:
        return args
    home, hosts = next(iter(homes.items()))
    if args.cluster is not None:
        raise NoPlacementError(
            f"deployment set {group.id} (affinity) has its members on host {', '.join(hosts)} "
            f"in cluster {home}; its new members cannot go to cluster {args.cluster}",
            "deployment_set_affinity",
            {
                "cluster": home,
                "hosts": hosts,
                "rejected_clusters": {args.cluster: f"deployment set {group.id} is in {home}"},
                "clusters": {},
            },
        )
    return replace(args, cluster=home)


def _preempt(
    views: Replica,
    clusters: list[ClusterView],
    args: PlaceArgs,
    ids: tuple[str, ...],
    seed: int,
    now: float,
    busy: frozenset[str],
) -> Choice | None:
    if plan_preemption is None or not views.preemptible:
        return None
    preemptible = views.preemptible

    def is_preemptible(alloc: Any) -> bool:
        return alloc.instance_id in preemptible

    def created_at(alloc: Any) -> float:
        return preemptible.get(alloc.instance_id, 0.0)

    for view in clusters:
        request = _cluster_request(view, args, ids, seed, busy)
        plan = plan_preemption(
            views.scheduler,
            view.table,
            request,
            now,
            is_preemptible,
            created_at,
        )
        if plan is not None and plan.evictions:
            return Choice(view, plan.decision, tuple(plan.evictions))
    return None


def _candidates(views: Replica, args: PlaceArgs) -> tuple[list[ClusterView], dict[str, str]]:
    rejected: dict[str, str] = {}
    out = []
    if args.region is not None and args.region not in {
        *views.regions,
        *(p for p in views.regions.values() if p),
    }:
        raise BadRequestError("region", f"unknown region {args.region!r}")
    if args.cluster is not None and args.cluster not in views.clusters:
        raise BadRequestError("cluster", f"unknown cluster {args.cluster!r}")
    image_clusters = None if args.image is None else args.image.get("clusters")
    for view in views.clusters.values():
        if args.cluster is not None and view.name != args.cluster:
            continue
        if args.region is not None and args.region not in (
            view.region,
            views.regions.get(view.region),
        ):
            if args.cluster is not None:  # named, or the home of an affinity set
                rejected[view.name] = f"not in region {args.region}"
            continue
        if view.state != "active":
            rejected[view.name] = "cluster has left"
        elif args.flavor not in view.table.flavors:
            rejected[view.name] = f"flavor {args.flavor} is not offered"
        elif image_clusters is not None and view.name not in image_clusters:
            rejected[view.name] = f"image {args.image and args.image['name']} is not present"
        elif args.pool is not None and args.pool not in view.pools:
            rejected[view.name] = f"no pool {args.pool}"
        elif len(view.table) == 0:
            rejected[view.name] = "no hosts"
        else:
            out.append(view)
    if views.config.cluster_order == "name" or len(out) < 2:
        out.sort(key=lambda v: v.name)
    else:
        # resource room only (cached per host): ordering needs no filter passes
        free = {v.name: int(v.table.resource_counts(args.flavor).sum()) for v in out}
        sign = -1 if views.config.cluster_order == "most_free" else 1
        out.sort(key=lambda v: (sign * free[v.name], v.name))
    return out, rejected


def _claims(
    views: Replica, args: PlaceArgs, plan: Choice
) -> tuple[list[NewInstance], dict[str, int], dict[str, int], dict[str, HostCapacity]]:
    table = plan.cluster.table
    new = [
        NewInstance(
            id=s.instance_id,
            host=s.host,
            cluster=plan.cluster.name,
            flavor=args.flavor,
            footprint=to_named(s.cell_use, s.host_use, table.device_types),
            project=args.project,
            server_group=args.deployment_set,
            business_type=args.business_type,
            preemptible=is_preemptible(args.business_type),
            network=args.network,
        )
        for s in plan.decision.selections
    ]
    touched = {s.host for s in plan.decision.selections}
    for iid in plan.evictions:
        touched.add(table.allocations[iid].host)
    host_gens = {h: int(table.generation[table.index[h]]) for h in touched}
    group_gens: dict[str, int] = {}
    if args.set_key is not None:
        group_gens[args.set_key] = views.groups[args.set_key].generation
    caps = {
        h: HostCapacity(
            table.cell_cap[table.index[h]].copy(),
            table.host_cap[table.index[h]].copy(),
            list(table.device_types),
        )
        for h in touched
    }
    return new, host_gens, group_gens, caps


def _cluster_request(
    view: ClusterView, args: PlaceArgs, ids: tuple[str, ...], seed: int, busy: frozenset[str]
) -> RequestSpec:
    """The core request for one candidate cluster: the pool as a required trait, and the hosts
    this replica is still committing to left out."""
    image = args.image or {}
    traits = list(image.get("required_traits") or [])
    if args.pool is not None:
        traits.append(view.pools[args.pool])
    return RequestSpec(
        flavor=args.flavor,
        num_instances=args.count,
        availability_zone=args.availability_zone,
        image=ImageProps(
            architecture=image.get("architecture"),
            hypervisor_type=image.get("hypervisor_type"),
            required_traits=tuple(traits),
        ),
        server_group=args.set_key,
        same_host=args.same_host,
        different_host=args.different_host,
        ignore_hosts=tuple(h for h in busy if h in view.table.index),
        project=args.project,
        instance_ids=ids,
        seed=seed,
    )
