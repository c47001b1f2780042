"""The `/v1/schedule` decider: the multi-cloud policy engine's pipeline on the replica's tables.

The engine (`berth.service.policy_topology.PolicyView`) runs its pipeline (pre-check,
deployment set, flavor candidates by business type and user, placement, preemption) to decide;
the decision then commits through the store exactly as `/v1/placements` does
(`berth.service.placing.commit`). The engine's own in-memory `commit` is not used: the database
is the one source of truth, and the engine's view follows it through events.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from berth.core.why import DEFAULT_TOP, InstanceWhy
from berth.policy.model import EVICTABLE, Business
from berth.policy.outcome import Failure, Placement, ScheduleRequest
from berth.policy.pipeline import PolicyEngine
from berth.policy.placing import WhyRecorders
from berth.service.placing.commit import commit_with_retries
from berth.service.placing.decider import Attempt, Plan
from berth.service.placing.errors import BadRequestError
from berth.service.policy_topology import policy_view
from berth.service.replica import Replica
from berth.store.errors import AlreadyExistsError
from berth.store.footprint import to_named
from berth.store.repo import (
    CommitResult,
    GroupRow,
    HostCapacity,
    NewInstance,
    instance_set_key,
    set_key,
    split_set_key,
)


class PolicyFailureError(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class Scheduled:
    placement_id: str
    placement: Placement
    commit: CommitResult
    attempts: int
    decision_ms: float
    response: dict[str, Any] | None = None
    why: list[InstanceWhy] | None = None
    """Each instance explained (asked, or `ServiceConfig.why_all`); None when the placement
    evicted (the least-damage plan chose the host, not the weighers)."""


def schedule(
    replica: Replica,
    request: ScheduleRequest,
    *,
    idempotency: tuple[str, str, str] | None = None,
    response: Callable[[Scheduled], dict[str, Any]] | None = None,
    why: int = 0,
) -> Scheduled:
    """Decide with the policy engine on the replica's tables, commit through the store.
    `why`: explain the choice with this many candidates per instance (0: only if the replica
    records why for every decision, `ServiceConfig.why_all`)."""
    view = policy_view(replica)
    if view is None:
        raise BadRequestError("policy", "this replica runs without a policy (serve --policy)")
    started = time.perf_counter()
    ids = tuple(f"i-{secrets.token_hex(8)}" for _ in range(request.count))
    request = request.model_copy(update={"instance_ids": ids})
    _ensure_set(replica, view.engine, request)
    # the engine knows sets by key (sets are per project: `berth.store.records.set_key`)
    key = instance_set_key(request.project, request.deployment_set)
    request = request.model_copy(update={"deployment_set": key})
    return commit_with_retries(
        replica,
        MultiCloudDecider(view.engine, why or (DEFAULT_TOP if replica.config.why_all else 0)),
        request,
        guard=view.lock,
        idempotency=idempotency,
        response=response,
        started=started,
    )


class MultiCloudDecider:
    """Chooses for `/v1/schedule` (a `berth.service.placing.decider.Decider`)."""

    def __init__(self, engine: PolicyEngine, why: int = 0) -> None:
        self.engine = engine
        self.why = why
        """Candidates to explain per instance (`core.why`; 0: nothing recorded)."""

    def decide(self, views: Replica, request: ScheduleRequest, attempt: Attempt) -> Plan[Scheduled]:
        """The engine's placement, or `PolicyFailureError` with its explained failure."""
        recorders = WhyRecorders(self.why) if self.why else None
        t0 = time.perf_counter()
        outcome = self.engine.decide(request, views.clock(), recorders)
        decision_ms = (time.perf_counter() - t0) * 1e3
        if isinstance(outcome, Failure):
            raise PolicyFailureError(outcome)
        placement = outcome
        table = views.clusters[placement.cluster].table
        touched = set(placement.decision.generations)
        touched |= {table.allocations[i].host for i in placement.evictions}
        host_gens = {h: int(table.generation[table.index[h]]) for h in touched}
        group_gens = {}
        if request.deployment_set is not None:
            group_gens[request.deployment_set] = views.groups[request.deployment_set].generation
        new = [
            NewInstance(
                id=sel.instance_id,
                host=sel.host,
                cluster=placement.cluster,
                flavor=placement.flavor,
                footprint=to_named(sel.cell_use, sel.host_use, table.device_types),
                project=request.project,
                server_group=_set_id(request.deployment_set),
                business_type=request.business.value,
                preemptible=request.business in EVICTABLE,
                network=placement.network,
            )
            for sel in placement.decision.selections
        ]
        caps = {
            h: HostCapacity(
                table.cell_cap[table.index[h]].copy(),
                table.host_cap[table.index[h]].copy(),
                list(table.device_types),
            )
            for h in touched
        }
        why = None if recorders is None else recorders.explained(placement)
        done = Scheduled(
            attempt.placement_id, placement, CommitResult(), attempt.number, decision_ms, why=why
        )
        return Plan(
            done,
            new,
            host_gens,
            group_gens,
            caps,
            placement.flavor,
            request.project,
            request.count,
            evictions=tuple(placement.evictions),
            preemptible_limit=_limit(self.engine, placement, request),
            why=why,
        )


def _limit(
    engine: PolicyEngine, placement: Placement, request: ScheduleRequest
) -> tuple[str, int] | None:
    """The IDC's preemptible limit, re-checked in the commit (None: not preemptible, no limit)."""
    if request.business != Business.PREEMPTIBLE:
        return None
    limits = engine.policy.preemptible_limits
    limit = limits.idcs.get(placement.idc, limits.default)
    return None if limit is None else (placement.idc, limit)


def _ensure_set(replica: Replica, engine: PolicyEngine, request: ScheduleRequest) -> None:
    """Check the request's deployment set, creating it when the policy says so."""
    name = request.deployment_set
    if name is None:
        return
    group = replica.groups.get(set_key(request.project, name))
    if group is not None:
        if group.policy == "affinity":  # the pipeline spreads a set's members
            raise BadRequestError(
                "deployment_set",
                f"deployment set {name!r} is {group.policy}; /v1/schedule places only into "
                "anti-affinity sets (use /v1/placements)",
            )
        return
    defaults = engine.policy.deployment_sets
    if not defaults.create_on_use:
        raise BadRequestError(
            "deployment_set", f"unknown deployment set {name!r}", "unknown_deployment_set"
        )
    with contextlib.suppress(AlreadyExistsError):
        replica.store.add_group(
            GroupRow(
                name, request.project, "anti-affinity", 1, defaults.max_size, 0, defaults.scope
            )
        )
    replica.sync()


def _set_id(key: str | None) -> str | None:
    """The id of the set with this key (the store keeps project and id apart), or None."""
    return None if key is None else split_set_key(key)[1]
