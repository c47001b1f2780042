"""Placements: choose hosts for `count` instances and claim them (`Replica.place`); read one."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from berth.service import schemas as s
from berth.service.bodies import cell_dicts, instance_out, server_out
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
from berth.service.errors import ApiError, ErrorBody, not_found
from berth.service.idempotency import (
    Idempotency,
    committed_answer,
    idempotent,
    one_at_a_time,
    replay_stored,
)
from berth.service.metrics import Metrics
from berth.service.placing.errors import ContentionError, NoPlacementError
from berth.service.placing.plain import (
    PlaceArgs,
    Placed,
    is_preemptible,
    place,
    record_failure,
)
from berth.service.replica import Replica
from berth.service.scope import check_hints
from berth.store.errors import IdempotencyRaceError, NotFoundError
from berth.store.footprint import to_named
from berth.store.repo import Store

router = APIRouter(prefix="/v1", tags=["placement"])


def _placement_out(replica: Replica, args: PlaceArgs, placed: Placed) -> dict[str, Any]:
    """The 201 body as plain JSON data (the shape of `PlacementOut`, built without models:
    this runs once per placement)."""
    table = replica.clusters[placed.cluster].table
    now = time.time()
    instances = []
    for sel in placed.decision.selections:
        fp = to_named(sel.cell_use, sel.host_use, table.device_types)
        instances.append(
            {
                "id": sel.instance_id,
                "project": args.project,
                "flavor": args.flavor,
                "host": sel.host,
                "cluster": placed.cluster,
                "deployment_set": args.deployment_set,
                "placement_id": placed.placement_id,
                "business_type": args.business_type,
                "preemptible": is_preemptible(args.business_type),
                "cells": cell_dicts(fp),
                "host_use": fp["host"],
                "created_at": now,
            }
        )
    return {
        "id": placed.placement_id,
        "flavor": args.flavor,
        "project": args.project,
        "cluster": placed.cluster,
        "instances": instances,
        "alternates": {sel.instance_id: list(sel.alternates) for sel in placed.decision.selections},
        "evicted": placed.evicted,
        "decision_ms": round(placed.decision_ms, 3),
        "attempts": placed.attempts,
        **({"why": placed.why} if args.why else {}),
    }


def _network_cluster(store: Store, body: s.PlacementIn) -> str | None:
    """The cluster the request's network pins it to (else the requested cluster); 422 for an
    unknown network or one of another cluster, 409 when the network has too few free IPs."""
    cluster = body.cluster
    if body.network is None:
        return cluster
    nets = {n["name"]: n for n in store.list_ip_pools()}
    net = nets.get(body.network)
    if net is None:
        raise ApiError(
            422,
            "invalid_reference",
            f"network: unknown network {body.network!r}",
            field="network",
        )
    if cluster is not None and cluster != net["cluster"]:
        raise ApiError(
            422,
            "invalid_input",
            f"network: {body.network!r} belongs to cluster {net['cluster']!r}, not {cluster!r}",
            field="network",
        )
    if net["total"] - net["used"] < body.count:
        raise ApiError(
            409,
            "no_valid_host",
            f"network {body.network} has {net['total'] - net['used']} free IPs, "
            f"{body.count} needed",
            details={"reason": "insufficient_ips"},
        )
    return net["cluster"]


def _place_args(store: Store, body: s.PlacementIn, project: str, why: int = 0) -> PlaceArgs:
    """The replica's arguments for the request: its image looked up, its network's cluster."""
    image = None
    if body.image is not None:
        try:
            image = store.get_image(body.image)
        except NotFoundError:
            raise ApiError(
                422, "invalid_reference", f"image: unknown image {body.image!r}", field="image"
            ) from None
    cluster = _network_cluster(store, body)
    return PlaceArgs(
        flavor=body.flavor,
        count=body.count,
        project=project,
        region=body.region,
        cluster=cluster,
        pool=body.pool,
        availability_zone=body.availability_zone,
        image=image,
        deployment_set=body.deployment_set,
        same_host=tuple(body.same_host),
        different_host=tuple(body.different_host),
        business_type=body.business_type,
        seed=body.seed,
        network=body.network,
        why=why,
    )


@router.post(
    "/placements",
    status_code=201,
    response_model=s.PlacementOut,
    responses={409: {"model": ErrorBody, "description": "no valid host (with the diagnosis)"}},
)
def create_placement(
    body: s.PlacementIn,
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
    """Choose hosts for `count` instances (all or nothing) and claim them.

    With `?why=true` the answer carries `why`: per instance, the winner's and the next
    candidates' scores weigher by weigher, the deciding weigher and ties (docs/why.md).

    With an `Idempotency-Key`, a retried request returns the first answer and never
    places twice (the key is stored in the claim's own transaction). In a cluster Berth
    drives, each instance is then booted on its host (an alternate when the cloud refuses;
    409 `boot_failed`, every claim released, when none boots: docs/openstack.md).
    """
    deny_reader(p, "place instances")
    started = time.perf_counter()
    project = p.project_for(body.project)
    args = _place_args(store, body, project, why_top if why else 0)
    with one_at_a_time(p, idempotency_key):
        idem, replayed = idempotent(
            store, p, idempotency_key, {**body.model_dump(mode="json"), "project": project}
        )
        if replayed is not None:
            return replayed
        check_hints(store, p, {"same_host": args.same_host, "different_host": args.different_host})
        return _place(store, replica, metrics, clouds, args, idem, started)


def _place(
    store: Store,
    replica: Replica,
    metrics: Metrics,
    clouds: CloudService,
    args: PlaceArgs,
    idem: Idempotency | None,
    started: float,
) -> Any:
    """Place and answer 201; a failure while another request with the same key committed
    answers with that request's placement (docs/service.md, "Idempotency"). A request with a
    key that finds no host decides once more if the log moved since (caught up first): a
    replica that had not yet heard of a release must not answer 409 while a twin request on
    another replica takes the freed slot."""
    for last_try in (idem is None, True):
        seen = replica.last_event  # the log as far as the decision can have seen it
        try:
            placed = place(
                replica,
                args,
                idempotency=idem,
                response=lambda pl: _placement_out(replica, args, pl),
            )
            break
        except IdempotencyRaceError:
            assert idem is not None
            return replay_stored(store, idem)
        except NoPlacementError as exc:
            if (won := committed_answer(store, idem)) is not None:
                return won
            if not last_try and (replica.sync() or replica.last_event != seen):
                continue
            _failed(replica, metrics, args, exc.reason, started, str(exc))
            raise
        except ContentionError as exc:
            if (won := committed_answer(store, idem)) is not None:
                return won
            _failed(replica, metrics, args, "contention", started, str(exc))
            raise
    answer = placed.response or _placement_out(replica, args, placed)
    if clouds.drives(placed.cluster):
        try:
            answer = _boot(clouds, args, placed, answer)
        except BootFailedError as exc:
            _failed(replica, metrics, args, "boot_failed", started, str(exc))
            raise
    metrics.placements.labels("success", "placed").inc()
    metrics.placement.observe(time.perf_counter() - started)
    if placed.attempts > 1:
        metrics.conflicts.inc(placed.attempts - 1)
    return JSONResponse(answer, status_code=201)


def _boot(
    clouds: CloudService, args: PlaceArgs, placed: Placed, answer: dict[str, Any]
) -> dict[str, Any]:
    """Boot the placement's instances; the answer with each one's final host and server."""
    targets = [
        BootTarget(
            Claim(
                sel.instance_id,
                placed.cluster,
                args.flavor,
                args.project,
                args.deployment_set,
                placed.placement_id,
                args.business_type,
                args.business_type == "preemptible",
            ),
            sel.host,
            sel.alternates,
        )
        for sel in placed.decision.selections
    ]
    return boot_answer(clouds, placed.cluster, targets, answer)


def boot_answer(
    clouds: CloudService, cluster: str, targets: list[BootTarget], answer: dict[str, Any]
) -> dict[str, Any]:
    """Boot `targets` in `cluster` (all or nothing: `BootFailedError`); `answer` with each
    instance's final host and its server (shared with /v1/schedule)."""
    records = {r.instance_id: r for r in clouds.boot(cluster, targets)}
    instances = []
    for inst in answer["instances"]:
        r = records.get(inst["id"])
        if r is not None:
            inst = {**inst, "host": r.host, "server": server_out(r).model_dump(mode="json")}
        instances.append(inst)
    return {**answer, "instances": instances}


def _failed(
    replica: Replica,
    metrics: Metrics,
    args: PlaceArgs,
    reason: str,
    started: float,
    message: str,
) -> None:
    """Count and record a failed placement with its explanation."""
    metrics.placements.labels("failure", reason).inc()
    if reason != "contention":
        metrics.placement.observe(time.perf_counter() - started)
    record_failure(replica, args, reason, started, message)


@router.get("/placements/{placement_id}", response_model=s.PlacementOut)
def get_placement(placement_id: s.Ident, p: Who, store: StoreDep) -> s.PlacementOut:
    rows = store.list_instances(placement_id=placement_id, project=p.visible_project())
    if not rows:
        raise not_found("placement", placement_id)
    return s.PlacementOut(
        id=placement_id,
        flavor=rows[0].flavor,
        project=rows[0].project,
        cluster=rows[0].cluster,
        instances=[instance_out(r) for r in rows],
    )
