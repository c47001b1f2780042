"""The multi-cloud pipeline route, `/v1/schedule` (needs `berth serve --policy FILE`)."""

from __future__ import annotations

import time
from typing import Annotated, Any, NoReturn

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from berth.policy.errors import MultiCloudInputError
from berth.policy.outcome import Failure, ScheduleRequest
from berth.service import schemas as s
from berth.service.bodies import cells
from berth.service.clouds.booting import BootTarget
from berth.service.clouds.claiming import Claim
from berth.service.clouds.errors import BootFailedError
from berth.service.clouds.service import CloudService
from berth.service.deps import (
    CloudsDep,
    IdempotencyKey,
    MetricsDep,
    ReplicaDep,
    StoreDep,
    Who,
    deny_reader,
)
from berth.service.errors import ApiError, ErrorBody, policy_not_configured
from berth.service.idempotency import (
    Idempotency,
    committed_answer,
    idempotent,
    one_at_a_time,
    replay_stored,
)
from berth.service.metrics import Metrics
from berth.service.placing.errors import ContentionError
from berth.service.placing.multicloud import PolicyFailureError, Scheduled
from berth.service.placing.multicloud import schedule as policy_schedule
from berth.service.placing.plain import is_preemptible
from berth.service.policy_topology import policy_engine
from berth.service.replica import Replica
from berth.service.routes.placements import boot_answer
from berth.store.errors import IdempotencyRaceError
from berth.store.footprint import to_named
from berth.store.repo import Outcome, Store

router = APIRouter(prefix="/v1", tags=["placement"])

CAPACITY_STEPS = ("placement", "preemption", "deployment_set", "preemptible_limit", "precheck")
"""Pipeline steps whose failure means no room (409 `no_valid_host`); others are bad input."""


def _schedule_out(
    replica: Replica, req: s.ScheduleIn, project: str, done: Scheduled, why: int = 0
) -> dict[str, Any]:
    """The 201 body; with `why` (asked) it carries each instance's `core.why` answer, or
    null when the placement evicted (the least-damage plan chose, not the weighers)."""
    pl = done.placement
    table = replica.clusters[pl.cluster].table
    info = pl.to_dict()
    now = time.time()
    out = s.ScheduleOut(
        id=done.placement_id,
        region=pl.region,
        idc=pl.idc,
        cluster=pl.cluster,
        pool=pl.pool,
        variant=pl.variant,
        flavor=pl.flavor,
        network=pl.network,
        project=project,
        instances=[
            s.InstanceOut(
                id=sel.instance_id,
                project=project,
                flavor=pl.flavor,
                host=sel.host,
                cluster=pl.cluster,
                deployment_set=req.deployment_set,
                placement_id=done.placement_id,
                business_type=req.business,
                preemptible=is_preemptible(req.business),
                cells=cells(fp := to_named(sel.cell_use, sel.host_use, table.device_types)),
                host_use=fp["host"],
                created_at=now,
            )
            for sel in pl.decision.selections
        ],
        evicted=list(pl.evictions),
        candidates=info["candidates"],
        attempts=info["attempts"],
        rejections=info["rejections"],
        decision_ms=round(done.decision_ms, 3),
        commit_attempts=done.attempts,
    )
    answer = out.model_dump(mode="json", exclude={"why"})
    if why:
        answer["why"] = None if done.why is None else [w.to_dict() for w in done.why]
    return answer


@router.post(
    "/schedule",
    status_code=201,
    response_model=s.ScheduleOut,
    responses={409: {"model": ErrorBody, "description": "the pipeline's explained failure"}},
)
def schedule_request(
    body: s.ScheduleIn,
    p: Who,
    store: StoreDep,
    replica: ReplicaDep,
    metrics: MetricsDep,
    clouds: CloudsDep,
    idempotency_key: IdempotencyKey = None,
    why: Annotated[
        bool,
        Query(
            description="Also answer why each host won: every weigher's part of the scores "
            "(docs/why.md)"
        ),
    ] = False,
    why_top: Annotated[int, Query(ge=2, le=50, description="Candidates shown with `why`")] = 3,
) -> Any:
    """The multi-cloud pipeline (needs `berth serve --policy FILE`): pre-check per IDC and
    cluster, deployment set, flavor variants by business type and user, placement in a
    pool, preemption; then the same optimistic commit as /v1/placements. In a cluster Berth
    drives, the servers of evicted instances are deleted and each instance is booted on its
    host, as /v1/placements does (alternates; 409 `boot_failed`: docs/openstack.md).

    With `?why=true` the answer carries `why`, as /v1/placements does: per instance, the
    winner's and the next candidates' scores weigher by weigher in the chosen pool, the
    deciding weigher and ties (docs/why.md)."""
    deny_reader(p, "place instances")
    if policy_engine(replica) is None:
        raise policy_not_configured()
    started = time.perf_counter()
    project = p.project_for(body.project)
    request = ScheduleRequest(
        region=body.region,
        flavor=body.flavor,
        count=body.count,
        business=body.business,
        user=body.user,
        deployment_set=body.deployment_set,
        image=body.image,
        network=body.network,
        project=project,
        seed=body.seed,
    )
    payload = {**body.model_dump(mode="json"), "project": project, "route": "schedule"}
    with one_at_a_time(p, idempotency_key):
        idem, replayed = idempotent(store, p, idempotency_key, payload)
        if replayed is not None:
            return replayed
        return _schedule(
            store, replica, metrics, clouds, body, request, idem, started, why_top if why else 0
        )


def _schedule(
    store: Store,
    replica: Replica,
    metrics: Metrics,
    clouds: CloudService,
    body: s.ScheduleIn,
    request: ScheduleRequest,
    idem: Idempotency | None,
    started: float,
    why: int = 0,
) -> Any:
    """Run the pipeline and answer 201 (`why`: candidates explained per instance, 0: not
    asked); a capacity failure (409) or contention while another request with the same key
    committed answers with that request's placement (docs/service.md, "Idempotency"). A
    request with a key that finds no room decides once more if the log moved since (caught up
    first), as /v1/placements does: a replica that had not yet heard of a release must not
    answer 409 while a twin on another replica takes the freed slot."""
    project = request.project
    for last_try in (idem is None, True):
        seen = replica.last_event  # the log as far as the decision can have seen it
        try:
            done = policy_schedule(
                replica,
                request,
                idempotency=idem,
                response=lambda d: _schedule_out(replica, body, project, d, why),
                why=why,
            )
            break
        except IdempotencyRaceError:
            assert idem is not None
            return replay_stored(store, idem)
        except PolicyFailureError as exc:
            capacity = exc.failure.step in CAPACITY_STEPS
            if capacity and (won := committed_answer(store, idem)) is not None:
                return won
            if capacity and not last_try and (replica.sync() or replica.last_event != seen):
                continue
            _refused(replica, metrics, body, project, exc.failure, started)
        except ContentionError:
            if (won := committed_answer(store, idem)) is not None:
                return won
            raise
        except MultiCloudInputError as exc:
            text = str(exc)
            where = text[2:].split(":", 1)[0] if text.startswith("--") else None
            raise ApiError(422, "invalid_input", text.removeprefix("--"), field=where) from None
    answer = done.response or _schedule_out(replica, body, project, done, why)
    if clouds.drives(done.placement.cluster):
        try:
            answer = _boot(clouds, request, done, answer)
        except BootFailedError:
            metrics.placements.labels("failure", "boot_failed").inc()
            latency_ms = (time.perf_counter() - started) * 1e3
            replica.store.record_outcome(
                Outcome("failure", "boot_failed", body.flavor, project, body.count, latency_ms)
            )
            raise
    metrics.placements.labels("success", "placed").inc()
    metrics.placement.observe(time.perf_counter() - started)
    return JSONResponse(answer, status_code=201)


def _boot(
    clouds: CloudService, request: ScheduleRequest, done: Scheduled, answer: dict[str, Any]
) -> dict[str, Any]:
    """Delete the evicted instances' servers (their claims went in the commit), then boot the
    placement's instances on their hosts; the answer with each one's final host and server."""
    pl = done.placement
    if pl.evictions:
        clouds.delete_servers(pl.cluster, pl.evictions)
    business = request.business.value
    targets = [
        BootTarget(
            Claim(
                sel.instance_id,
                pl.cluster,
                pl.flavor,
                request.project,
                request.deployment_set,  # the set's id (the route's request is not keyed)
                done.placement_id,
                business,
                business == "preemptible",
            ),
            sel.host,
            sel.alternates,
        )
        for sel in pl.decision.selections
    ]
    return boot_answer(clouds, pl.cluster, targets, answer)


def _refused(
    replica: Replica,
    metrics: Metrics,
    body: s.ScheduleIn,
    project: str,
    f: Failure,
    started: float,
) -> NoReturn:
    """Count and record the pipeline's failure; raise it as 409 (no room) or 422."""
    metrics.placements.labels("failure", f.code).inc()
    latency_ms = (time.perf_counter() - started) * 1e3
    replica.store.record_outcome(
        Outcome(
            "failure",
            f.code,
            body.flavor,
            project,
            body.count,
            latency_ms,
            str(body.business),
            f.message,
        )
    )
    status, code = (409, "no_valid_host") if f.step in CAPACITY_STEPS else (422, f.code)
    raise ApiError(status, code, f.message, details=f.to_dict())
