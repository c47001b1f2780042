"""The one commit-and-retry loop every way of placing goes through.

Each attempt decides on the replica's cache (a `Decider`), marks the touched hosts as having a
commit in flight, and commits with the generations it read (`Store.commit_placement`). A lost
race (`GenerationConflictError`, `PlanRejectedError`) releases the hosts, catches up on the
event log and decides again, at most `ServiceConfig.max_attempts` times.

The reload rule: a rejected plan always reloads (the cache missed something); a lost race
reloads only when the log does not explain it, i.e. after the sync the cache has not moved past
the generation the decision read (`_explained`). Contention on a hot host is then decided again
on the caught-up tables, without a full reload.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from berth.service.placing.decider import Attempt, Decider, Plan, R
from berth.service.placing.errors import ContentionError
from berth.service.placing.why_record import compact
from berth.service.replica import Replica
from berth.store.errors import GenerationConflictError, PlanRejectedError, StoreError
from berth.store.repo import Idempotent, NewInstance, Outcome

Q = TypeVar("Q")


def commit_with_retries(
    replica: Replica,
    decider: Decider[Q, R],
    request: Q,
    *,
    guard: AbstractContextManager[Any],
    idempotency: tuple[str, str, str] | None = None,
    response: Callable[[R], dict[str, Any]] | None = None,
    on_commit: Callable[[float, bool], None] | None = None,
    gave_up: str = "attempts",
    started: float | None = None,
) -> R:
    """Decide and commit, retrying on lost races; raise `ContentionError` when none is left.

    `guard` is held around every attempt (one commit in flight per deployment set, or one
    multi-cloud placement at a time). `idempotency` is (principal, key, request hash): the
    answer built by `response` is stored in the same transaction as the claim. `on_commit` is
    told each commit's seconds and whether it was applied; `gave_up` words the final error;
    `started` is when the request began (the outcome log's latency), by default now.
    """
    started = time.perf_counter() if started is None else started
    placement_id = "p-" + secrets.token_hex(8)
    last_conflict = ""
    lost: dict[str, int] = {}
    with guard:
        for number in range(1, replica.config.max_attempts + 1):
            plan, idem = _decide(
                replica, decider, request, Attempt(placement_id, number), idempotency, response
            )
            result, touched = plan.result, plan.touched
            committing = time.perf_counter()
            try:
                result.commit = replica.store.commit_placement(
                    placement_id=placement_id,
                    instances=plan.instances,
                    host_generations=plan.host_generations,
                    group_generations=plan.group_generations,
                    capacities=plan.capacities,
                    evict=[(i, f"preempted by {placement_id}") for i in plan.evictions],
                    idempotent=idem,
                    preemptible_limit=plan.preemptible_limit,
                    outcome=Outcome(
                        "success",
                        "placed",
                        plan.flavor,
                        plan.project,
                        plan.count,
                        (time.perf_counter() - started) * 1e3,
                        *chosen(plan.instances),
                        why=None if plan.why is None else compact(plan.why),
                    ),
                )
            except (GenerationConflictError, PlanRejectedError) as exc:
                if on_commit is not None:
                    on_commit(time.perf_counter() - committing, False)
                last_conflict = str(exc)
                key = getattr(exc, "name", "")
                lost[key] = lost.get(key, 0) + 1
                _catch_up(replica, exc, plan, lost[key])
                continue
            except BaseException:
                with replica.lock:
                    replica.release_hold(touched)
                raise
            if on_commit is not None:
                on_commit(time.perf_counter() - committing, True)
            with replica.lock:
                replica.apply_committed(result.commit)
                replica.release_hold(touched)
            return result
    raise ContentionError(
        f"gave up after {replica.config.max_attempts} {gave_up} (last: {last_conflict})"
    )


def _decide(
    replica: Replica,
    decider: Decider[Q, R],
    request: Q,
    attempt: Attempt,
    idempotency: tuple[str, str, str] | None,
    response: Callable[[R], dict[str, Any]] | None,
) -> tuple[Plan[R], Idempotent | None]:
    """One decision on a loaded cache and the answer to store with it; its hosts are held
    until the commit is over."""
    with replica.lock:
        if replica.needs_reload:
            replica.reload_locked()
        plan = decider.decide(replica, request, attempt)
        replica.hold(plan.touched)
        try:
            return plan, _idempotent(plan, idempotency, response)
        except BaseException:
            replica.release_hold(plan.touched)
            raise


def _idempotent(
    plan: Plan[R],
    idempotency: tuple[str, str, str] | None,
    response: Callable[[R], dict[str, Any]] | None,
) -> Idempotent | None:
    """The answer to store with the claim (built now: it names what was decided)."""
    if response is not None:
        plan.result.response = response(plan.result)
    if idempotency is None or plan.result.response is None:
        return None
    principal, key, digest = idempotency
    return Idempotent(principal, key, digest, 201, plan.result.response)


def _catch_up(replica: Replica, exc: StoreError, plan: Plan[Any], losses: int) -> None:
    """After a lost commit: release its hosts, sync, and reload unless the log explains it."""
    with replica.lock:
        if isinstance(exc, PlanRejectedError):  # the cache missed something
            replica.needs_reload = True
        replica.release_hold(plan.touched)
    replica.sync()  # catch up with whoever won, then decide again
    with replica.lock:
        # a race lost to a commit whose event has now been applied is plain contention (a hot
        # host): decide again on the caught-up table; only a loss the log does not explain
        # means the cache missed something
        if not _explained(replica, exc, plan, losses):
            replica.needs_reload = True


def _explained(replica: Replica, exc: StoreError, plan: Plan[Any], losses: int) -> bool:
    """Whether the cache, after a sync, has moved past the generation a lost commit read
    (caller holds the lock); other conflicts count as explained once."""
    if isinstance(exc, GenerationConflictError) and exc.kind == "host":
        cl = replica.host_cluster.get(exc.name)
        read = plan.host_generations.get(exc.name)
        if cl is None or read is None:
            return False
        table = replica.clusters[cl].table
        return int(table.generation[table.index[exc.name]]) != read
    if isinstance(exc, GenerationConflictError) and exc.kind == "deployment set":
        group = replica.groups.get(exc.name)
        read = plan.group_generations.get(exc.name)
        return group is not None and read is not None and group.generation != read
    return losses < 2


def chosen(instances: list[NewInstance]) -> tuple[str | None, str | None]:
    """(business type, "cluster: host, host x2") of a placement's instances, for its outcome
    row (the dashboard's decision stream shows where each placement went)."""
    if not instances:
        return None, None
    counts: dict[str, int] = {}
    for i in instances:
        counts[i.host] = counts.get(i.host, 0) + 1
    hosts = ", ".join(h if n == 1 else f"{h} x{n}" for h, n in counts.items())
    return instances[0].business_type, f"{instances[0].cluster}: {hosts}"
