"""The FastAPI application: routes under /v1, /healthz, /metrics, errors as JSON.

`create_app(config)` builds one replica: a `Store` on the configured database, a `Replica`
holding the per-cluster tables, and (unless `background=False`, as in tests that drive sync by
hand) the thread that keeps the tables current (`berth.service.sync`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from berth.core import kernels
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor, Host
from berth.policy.capacity import capacity_report
from berth.policy.catalogue import PolicyError
from berth.policy.pipeline import ScheduleRequest
from berth.service import schemas as s
from berth.service.auth import Authenticator, Principal, require
from berth.service.defrag import DefragService, DefragThread
from berth.service.defrag import router as defrag_router
from berth.service.errors import ERROR_RESPONSES, ApiError, ErrorBody, install_handlers, not_found
from berth.service.metrics import Metrics
from berth.service.policy import PolicyFailureError, Scheduled
from berth.service.policy import schedule as policy_schedule
from berth.service.state import (
    ContentionError,
    NoPlacementError,
    PlaceArgs,
    Placed,
    Replica,
    ServiceConfig,
)
from berth.service.sync import SyncThread
from berth.store.defrag import migrating_instance
from berth.store.errors import (
    IdempotencyRaceError,
    NotFoundError,
)
from berth.store.footprint import Footprint, to_named
from berth.store.repo import GroupRow, InstanceRow, Outcome, PoolRow, Store

_CAPACITY_STEPS = ("placement", "preemption", "deployment_set", "preemptible_limit", "precheck")

log = logging.getLogger("berth.service")


# ---------------------------------------------------------------------------- helpers
def _cell_dicts(fp: Footprint) -> list[dict[str, Any]]:
    return [
        {"cell": i, **c}
        for i, c in enumerate(fp["cells"])
        if any(c.get(k) for k in ("vcpus", "pcpus", "memory_mb", "hugepages_mb")) or c.get("pci")
    ]


def _cells(fp: Footprint) -> list[s.CellUse]:
    return [
        s.CellUse(cell=i, **c)
        for i, c in enumerate(fp["cells"])
        if any(c.get(k) for k in ("vcpus", "pcpus", "memory_mb", "hugepages_mb")) or c.get("pci")
    ]


def instance_out(row: InstanceRow) -> s.InstanceOut:
    return s.InstanceOut(
        id=row.id,
        project=row.project,
        flavor=row.flavor,
        host=row.host,
        cluster=row.cluster,
        deployment_set=row.server_group,
        placement_id=row.placement_id,
        business_type=row.business_type,
        preemptible=row.preemptible,
        cells=_cells(row.placement),
        host_use=row.placement["host"],
        created_at=row.created_at,
        migration_of=migrating_instance(row.id),
    )


# ---------------------------------------------------------------------------- auth dependencies
# The auth dependencies are coroutines: FastAPI runs a plain function dependency in the thread
# pool, a hand-off to a worker thread and back per request. A cached token needs no I/O, so it is
# answered on the event loop; only a cache miss (once per token and TTL) goes to a thread.
async def _principal(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    auth: Authenticator = request.app.state.auth
    found = auth.cached(authorization)
    if found is None:
        found = await run_in_threadpool(auth.authenticate, authorization)
    return found


async def _reader(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p)
    return p


async def _operator(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p, write=True)
    return p


async def _admin(p: Annotated[Principal, Depends(_principal)]) -> Principal:
    require(p, admin=True)
    return p


Who = Annotated[Principal, Depends(_principal)]
IdempotencyKey = Annotated[
    str | None,
    Header(max_length=128, pattern=r"^[\x21-\x7e]+$", description="makes retries safe"),
]
Idempotency = tuple[str, str, str]
"""(token key, Idempotency-Key, request digest): what the claim's transaction stores."""


def _require_placer(p: Principal) -> None:
    if p.role == "reader":
        raise ApiError(403, "forbidden", "role 'reader' cannot place instances")


Reader = Annotated[Principal, Depends(_reader)]
Operator = Annotated[Principal, Depends(_operator)]
Admin = Annotated[Principal, Depends(_admin)]


# ---------------------------------------------------------------------------- the app
def create_app(
    config: ServiceConfig,
    *,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    background: bool = True,
    simulate_heartbeats: bool = False,
) -> FastAPI:
    kernels.prepare()  # the first placement does not wait for the engine's compiled kernels
    store = store or Store.open(config.db_url, replica=config.replica_id)
    replica = Replica(store, config, clock)
    replica.reload()
    metrics = Metrics(replica)
    auth = Authenticator(store, config.token_cache_ttl)
    sync = SyncThread(replica, simulate_heartbeats=simulate_heartbeats)
    defrag = DefragService(replica, metrics.registry)
    defrag_driver = DefragThread(defrag, config.poll_interval * 2)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if background:
            sync.start()
            defrag_driver.start()
        yield
        if background:
            defrag_driver.close()
            sync.close()

    app = FastAPI(
        title="Berth",
        version="1",
        description="VM placement and capacity control plane. Every /v1 route needs "
        "`Authorization: Bearer <token>`. Errors: `{error: {code, message, field, details}}`.",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
    )
    app.state.replica = replica
    app.state.store = store
    app.state.metrics = metrics
    app.state.sync = sync
    app.state.auth = auth
    app.state.defrag = defrag
    app.include_router(defrag_router)

    install_handlers(app)

    # ------------------------------------------------------------------ health & metrics
    @app.get("/healthz", response_model=s.Health, tags=["service"])
    def healthz() -> s.Health:
        try:
            last = store.latest_event_id()
            database = "ok"
        except Exception as exc:
            raise ApiError(503, "database_unavailable", f"database unavailable: {exc}") from None
        return s.Health(
            status="ok",
            replica=config.replica_id,
            database=database,
            last_event_id=last,
            hosts=replica.host_count(),
        )

    @app.get("/metrics", tags=["service"], response_class=Response)
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ------------------------------------------------------------------ topology
    @app.get("/v1/regions", response_model=list[s.Region], tags=["topology"])
    def list_regions(_p: Reader) -> list[s.Region]:
        return [s.Region(**r) for r in store.list_regions()]

    @app.post("/v1/regions", status_code=201, response_model=s.Region, tags=["topology"])
    def add_region(body: s.RegionIn, _p: Operator) -> s.Region:
        store.add_region(body.name, body.description)
        replica.sync()
        return s.Region(name=body.name, description=body.description)

    def _clusters() -> list[s.Cluster]:
        counts = replica.cluster_hosts()
        return [
            s.Cluster(name=c.name, region=c.region, state=c.state, hosts=counts.get(c.name, 0))
            for c in store.list_clusters()
        ]

    @app.get("/v1/clusters", response_model=list[s.Cluster], tags=["topology"])
    def list_clusters(_p: Reader) -> list[s.Cluster]:
        return _clusters()

    @app.post("/v1/clusters", status_code=201, response_model=s.Cluster, tags=["topology"])
    def join_cluster(body: s.ClusterIn, _p: Operator) -> s.Cluster:
        """A new cluster joins at run time (then add its pools and hosts)."""
        store.add_cluster(body.name, body.region)
        replica.sync()
        return s.Cluster(name=body.name, region=body.region, state="active", hosts=0)

    def _cluster_state(name: str, state: str) -> s.Cluster:
        store.set_cluster_state(name, state)
        replica.sync()
        for c in _clusters():
            if c.name == name:
                return c
        raise not_found("cluster", name)  # pragma: no cover - just set

    @app.post("/v1/clusters/{name}/leave", response_model=s.Cluster, tags=["topology"])
    def leave_cluster(name: s.Ident, _p: Operator) -> s.Cluster:
        """The cluster gets no more placements; its running instances are untouched."""
        return _cluster_state(name, "left")

    @app.post("/v1/clusters/{name}/join", response_model=s.Cluster, tags=["topology"])
    def rejoin_cluster(name: s.Ident, _p: Operator) -> s.Cluster:
        return _cluster_state(name, "active")

    @app.get("/v1/pools", response_model=list[s.Pool], tags=["topology"])
    def list_pools(_p: Reader, cluster: s.Ident | None = None) -> list[s.Pool]:
        return [
            s.Pool(cluster=p.cluster, name=p.name, trait=p.trait, description=p.description)
            for p in store.list_pools(cluster)
        ]

    @app.post("/v1/pools", status_code=201, response_model=s.Pool, tags=["topology"])
    def add_pool(body: s.PoolIn, _p: Operator) -> s.Pool:
        store.add_pool(PoolRow(body.cluster, body.name, body.trait, body.description))
        replica.sync()
        return s.Pool(**body.model_dump())

    # ------------------------------------------------------------------ hosts
    def _host_out(rec: Any) -> s.HostOut:
        usage = replica.host_usage(rec.host.name)
        return s.HostOut(
            name=rec.host.name,
            cluster=rec.cluster,
            pool=rec.pool,
            availability_zone=rec.host.availability_zone,
            enabled=rec.host.enabled,
            last_heartbeat=rec.host.last_heartbeat,
            generation=rec.generation,
            traits=list(rec.host.traits),
            usage=s.HostUsage(**usage) if usage is not None else None,
            report_ts=rec.report_ts,
        )

    @app.get("/v1/hosts", response_model=list[s.HostOut], tags=["hosts"])
    def list_hosts(_p: Reader, cluster: s.Ident | None = None) -> list[s.HostOut]:
        return [_host_out(r) for r in store.list_hosts(cluster)]

    @app.post("/v1/hosts", status_code=201, response_model=s.HostOut, tags=["hosts"])
    def add_host(body: s.HostIn, _p: Operator) -> s.HostOut:
        data = body.model_dump(exclude={"cluster", "pool"})
        try:
            host = Host.model_validate(data)
        except ValueError as exc:
            raise ApiError(422, "invalid_input", str(exc)) from None
        store.add_hosts(body.cluster, [(host, body.pool)])
        replica.sync()
        return _host_out(store.get_host(body.name))

    @app.get("/v1/hosts/{name}", response_model=s.HostOut, tags=["hosts"])
    def get_host(name: s.Ident, _p: Reader) -> s.HostOut:
        return _host_out(store.get_host(name))

    @app.delete("/v1/hosts/{name}", status_code=204, tags=["hosts"])
    def remove_host(name: s.Ident, _p: Operator) -> Response:
        """Decommission a host that runs nothing (409 `in_use` otherwise)."""
        store.remove_host(name)
        replica.sync()
        return Response(status_code=204)

    @app.post("/v1/hosts/{name}/enable", response_model=s.HostOut, tags=["hosts"])
    def enable_host(name: s.Ident, _p: Operator) -> s.HostOut:
        replica.set_enabled(name, True)
        return _host_out(store.get_host(name))

    @app.post("/v1/hosts/{name}/disable", response_model=s.HostOut, tags=["hosts"])
    def disable_host(name: s.Ident, _p: Operator) -> s.HostOut:
        replica.set_enabled(name, False)
        return _host_out(store.get_host(name))

    @app.post("/v1/hosts/{name}/reports", response_model=s.ReportOut, tags=["hosts"])
    def report(name: s.Ident, body: s.ReportIn, _p: Operator) -> s.ReportOut:
        """A compute node's heartbeat and view; an older report never overwrites a newer one."""
        view = None
        if body.instances is not None or body.used is not None:
            view = {"instances": body.instances, "used": body.used}
        applied = store.report(name, body.timestamp, view, down_after=config.service_down_time)
        if applied:
            replica.heartbeat(name, body.timestamp)
        rec = store.get_host(name)
        return s.ReportOut(applied=applied, host=name, last_heartbeat=rec.host.last_heartbeat)

    @app.post("/v1/reconcile", response_model=list[s.EventOut], tags=["hosts"])
    def reconcile(_p: Operator) -> list[s.EventOut]:
        """Compare reported instances with known ones now; returns the discrepancy events."""
        return [s.EventOut(**e.__dict__) for e in store.reconcile()]

    # ------------------------------------------------------------------ catalogue
    def _flavor_out(f: Flavor) -> s.FlavorOut:
        return s.FlavorOut(**f.model_dump(mode="json"))

    @app.get("/v1/flavors", response_model=list[s.FlavorOut], tags=["catalogue"])
    def list_flavors(_p: Who) -> list[s.FlavorOut]:
        return [_flavor_out(f) for f in store.list_flavors()]

    @app.post("/v1/flavors", status_code=201, response_model=s.FlavorOut, tags=["catalogue"])
    def add_flavor(body: s.FlavorIn, _p: Operator) -> s.FlavorOut:
        flavor = Flavor.model_validate(body.model_dump())
        parse_flavor(flavor, replica.aliases)  # bad extra specs: 422 naming the key
        store.add_flavor(flavor)
        replica.sync()
        return _flavor_out(flavor)

    @app.get("/v1/flavors/{name}", response_model=s.FlavorOut, tags=["catalogue"])
    def get_flavor(name: s.Ident, _p: Who) -> s.FlavorOut:
        for f in store.list_flavors():
            if f.name == name:
                return _flavor_out(f)
        raise not_found("flavor", name)

    @app.delete("/v1/flavors/{name}", status_code=204, tags=["catalogue"])
    def delete_flavor(name: s.Ident, _p: Operator) -> Response:
        store.delete_flavor(name)
        replica.sync()
        return Response(status_code=204)

    @app.get("/v1/images", response_model=list[s.ImageOut], tags=["catalogue"])
    def list_images(_p: Who) -> list[s.ImageOut]:
        return [s.ImageOut(**i) for i in store.list_images()]

    @app.post("/v1/images", status_code=201, response_model=s.ImageOut, tags=["catalogue"])
    def add_image(body: s.ImageIn, _p: Operator) -> s.ImageOut:
        store.add_image(body.model_dump())
        return s.ImageOut(**body.model_dump())

    @app.get("/v1/images/{name}", response_model=s.ImageOut, tags=["catalogue"])
    def get_image(name: s.Ident, _p: Who) -> s.ImageOut:
        return s.ImageOut(**store.get_image(name))

    @app.get("/v1/networks", response_model=list[s.NetworkOut], tags=["catalogue"])
    def list_networks(_p: Reader) -> list[s.NetworkOut]:
        return [s.NetworkOut(**n) for n in store.list_ip_pools()]

    @app.post("/v1/networks", status_code=201, response_model=s.NetworkOut, tags=["catalogue"])
    def add_network(body: s.NetworkIn, _p: Operator) -> s.NetworkOut:
        store.add_ip_pool(body.name, body.cluster, body.cidr, body.total)
        return s.NetworkOut(**body.model_dump(), used=0)

    # ------------------------------------------------------------------ deployment sets
    def _set_out(g: GroupRow) -> s.DeploymentSetOut:
        return s.DeploymentSetOut(
            id=g.id,
            project=g.project,
            policy=g.policy,
            max_per_host=g.max_per_host,
            max_size=g.max_size,
            members=replica.group_members(g.id),
        )

    def _visible_set(p: Principal, gid: str) -> GroupRow:
        for g in store.list_groups(p.visible_project()):
            if g.id == gid:
                return g
        raise not_found("deployment set", gid)

    @app.get("/v1/deployment-sets", response_model=list[s.DeploymentSetOut], tags=["placement"])
    def list_sets(p: Who) -> list[s.DeploymentSetOut]:
        return [_set_out(g) for g in store.list_groups(p.visible_project())]

    @app.post(
        "/v1/deployment-sets",
        status_code=201,
        response_model=s.DeploymentSetOut,
        tags=["placement"],
    )
    def add_set(body: s.DeploymentSetIn, p: Who) -> s.DeploymentSetOut:
        if p.role == "reader":
            raise ApiError(403, "forbidden", "role 'reader' cannot create deployment sets")
        project = p.project_for(body.project)
        row = GroupRow(body.id, project, body.policy.value, body.max_per_host, body.max_size, 0)
        store.add_group(row)
        replica.sync()
        return _set_out(row)

    @app.get("/v1/deployment-sets/{set_id}", response_model=s.DeploymentSetOut, tags=["placement"])
    def get_set(set_id: s.Ident, p: Who) -> s.DeploymentSetOut:
        return _set_out(_visible_set(p, set_id))

    @app.delete("/v1/deployment-sets/{set_id}", status_code=204, tags=["placement"])
    def delete_set(set_id: s.Ident, p: Who) -> Response:
        if p.role == "reader":
            raise ApiError(403, "forbidden", "role 'reader' cannot delete deployment sets")
        _visible_set(p, set_id)
        store.delete_group(set_id)
        replica.sync()
        return Response(status_code=204)

    # ------------------------------------------------------------------ placements
    def _placement_out(args: PlaceArgs, placed: Placed) -> dict[str, Any]:
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
                    "preemptible": args.business_type == "preemptible",
                    "cells": _cell_dicts(fp),
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
            "alternates": {
                sel.instance_id: list(sel.alternates) for sel in placed.decision.selections
            },
            "evicted": placed.evicted,
            "decision_ms": round(placed.decision_ms, 3),
            "attempts": placed.attempts,
        }

    @app.post(
        "/v1/placements",
        status_code=201,
        response_model=s.PlacementOut,
        tags=["placement"],
        responses={409: {"model": ErrorBody, "description": "no valid host (with the diagnosis)"}},
    )
    def create_placement(
        body: s.PlacementIn,
        p: Who,
        idempotency_key: IdempotencyKey = None,
    ) -> Any:
        """Choose hosts for `count` instances (all or nothing) and claim them.

        With an `Idempotency-Key`, a retried request returns the first answer and never
        places twice (the key is stored in the claim's own transaction).
        """
        _require_placer(p)
        started = time.perf_counter()
        project = p.project_for(body.project)
        image = None
        if body.image is not None:
            try:
                image = store.get_image(body.image)
            except NotFoundError:
                raise ApiError(
                    422, "invalid_reference", f"image: unknown image {body.image!r}", field="image"
                ) from None
        cluster = body.cluster
        if body.network is not None:
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
                    f"network: {body.network!r} belongs to cluster {net['cluster']!r}, "
                    f"not {cluster!r}",
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
            cluster = net["cluster"]
        args = PlaceArgs(
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
        )
        idem, replayed = _idempotent(
            p, idempotency_key, {**body.model_dump(mode="json"), "project": project}
        )
        if replayed is not None:
            return replayed
        try:
            placed = replica.place(
                args,
                idempotency=idem,
                response=lambda pl: _placement_out(args, pl),
            )
        except IdempotencyRaceError:
            assert idem is not None
            return _replay_stored(idem)
        except NoPlacementError as exc:
            metrics.placements.labels("failure", exc.reason).inc()
            metrics.placement.observe(time.perf_counter() - started)
            replica.record_failure(args, exc.reason, started)
            raise
        except ContentionError:
            metrics.placements.labels("failure", "contention").inc()
            replica.record_failure(args, "contention", started)
            raise
        metrics.placements.labels("success", "placed").inc()
        metrics.placement.observe(time.perf_counter() - started)
        if placed.attempts > 1:
            metrics.conflicts.inc(placed.attempts - 1)
        answer = placed.response or _placement_out(args, placed)
        return JSONResponse(answer, status_code=201)

    def _idempotent(
        p: Principal, key: str | None, payload: dict[str, Any]
    ) -> tuple[Idempotency | None, Any]:
        """(what the claim stores for this key, the stored answer to replay if there is one)."""
        if key is None:
            return None, None
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        stored = store.get_idempotent(p.key, key)
        if stored is None:
            return (p.key, key, digest), None
        return (p.key, key, digest), _replay(
            stored.request_hash, digest, stored.status, stored.response
        )

    def _replay_stored(idem: Idempotency) -> Any:
        """The answer a concurrent request with the same key stored first."""
        stored = store.get_idempotent(idem[0], idem[1])
        assert stored is not None
        return _replay(stored.request_hash, idem[2], stored.status, stored.response)

    def _replay(stored_hash: str, digest: str, status: int, response: dict[str, Any]) -> Any:
        if stored_hash != digest:
            raise ApiError(
                422,
                "idempotency_key_reused",
                "Idempotency-Key was already used with a different request body",
                field="Idempotency-Key",
            )
        return JSONResponse(response, status_code=status, headers={"Idempotent-Replayed": "true"})

    def _schedule_out(req: s.ScheduleIn, project: str, done: Scheduled) -> dict[str, Any]:
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
                    preemptible=req.business == "preemptible",
                    cells=_cells(fp := to_named(sel.cell_use, sel.host_use, table.device_types)),
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
        return out.model_dump(mode="json")

    @app.post(
        "/v1/schedule",
        status_code=201,
        response_model=s.ScheduleOut,
        tags=["placement"],
        responses={409: {"model": ErrorBody, "description": "the pipeline's explained failure"}},
    )
    def schedule_request(
        body: s.ScheduleIn,
        p: Who,
        idempotency_key: IdempotencyKey = None,
    ) -> Any:
        """The multi-cloud pipeline (needs `berth serve --policy FILE`): pre-check per IDC and
        cluster, deployment set, flavor variants by business type and user, placement in a
        pool, preemption; then the same optimistic commit as /v1/placements."""
        _require_placer(p)
        if replica.engine is None:
            raise ApiError(
                409,
                "policy_not_configured",
                "this service runs without a multi-cloud policy (berth serve --policy FILE)",
            )
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
        idem, replayed = _idempotent(
            p,
            idempotency_key,
            {**body.model_dump(mode="json"), "project": project, "route": "schedule"},
        )
        if replayed is not None:
            return replayed
        try:
            done = policy_schedule(
                replica,
                request,
                idempotency=idem,
                response=lambda d: _schedule_out(body, project, d),
            )
        except IdempotencyRaceError:
            assert idem is not None
            return _replay_stored(idem)
        except PolicyFailureError as exc:
            f = exc.failure
            metrics.placements.labels("failure", f.code).inc()
            replica.store.record_outcome(
                Outcome(
                    "failure",
                    f.code,
                    body.flavor,
                    project,
                    body.count,
                    (time.perf_counter() - started) * 1e3,
                )
            )
            status, code = (409, "no_valid_host") if f.step in _CAPACITY_STEPS else (422, f.code)
            raise ApiError(status, code, f.message, details=f.to_dict()) from None
        except PolicyError as exc:
            text = str(exc)
            where = text[2:].split(":", 1)[0] if text.startswith("--") else None
            raise ApiError(422, "invalid_input", text.removeprefix("--"), field=where) from None
        metrics.placements.labels("success", "placed").inc()
        metrics.placement.observe(time.perf_counter() - started)
        return JSONResponse(done.response or {}, status_code=201)

    @app.get("/v1/placements/{placement_id}", response_model=s.PlacementOut, tags=["placement"])
    def get_placement(placement_id: s.Ident, p: Who) -> s.PlacementOut:
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

    # ------------------------------------------------------------------ instances
    @app.get("/v1/instances", response_model=list[s.InstanceOut], tags=["placement"])
    def list_instances(
        p: Who,
        host: s.Ident | None = None,
        cluster: s.Ident | None = None,
        project: s.Ident | None = None,
        deployment_set: s.Ident | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        after: s.Ident | None = None,
    ) -> list[s.InstanceOut]:
        """Instances, by id; page with `after` (the last id seen). Tenants see their own only."""
        visible = p.visible_project()
        if visible is not None:
            if project is not None and project != visible:
                return []
            project = visible
        rows = store.list_instances(
            project=project,
            host=host,
            cluster=cluster,
            server_group=deployment_set,
            limit=limit,
            after=after,
        )
        return [instance_out(r) for r in rows]

    @app.get("/v1/instances/{instance_id}", response_model=s.InstanceOut, tags=["placement"])
    def get_instance(instance_id: s.Ident, p: Who) -> s.InstanceOut:
        row = store.get_instance(instance_id)
        visible = p.visible_project()
        if visible is not None and row.project != visible:
            raise not_found("instance", instance_id)
        return instance_out(row)

    @app.delete("/v1/instances/{instance_id}", status_code=204, tags=["placement"])
    def delete_instance(instance_id: s.Ident, p: Who) -> Response:
        """Release the instance's claim (its host's generation moves on)."""
        if p.role == "reader":
            raise ApiError(403, "forbidden", "role 'reader' cannot delete instances")
        replica.release(instance_id, project=p.visible_project())
        return Response(status_code=204)

    # ------------------------------------------------------------------ evictions
    @app.get("/v1/evictions", response_model=list[s.EvictionOut], tags=["placement"])
    def list_evictions(
        p: Who, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000
    ) -> list[s.EvictionOut]:
        return [s.EvictionOut(**e) for e in store.list_evictions(p.visible_project(), limit)]

    @app.post("/v1/evictions", status_code=201, response_model=s.EvictionOut, tags=["placement"])
    def evict(body: s.EvictionIn, _p: Operator) -> s.EvictionOut:
        """Evict (release) an instance and record why, so its owner can be told."""
        replica.release(body.instance_id, reason=body.reason)
        found = [e for e in store.list_evictions() if e["instance_id"] == body.instance_id]
        return s.EvictionOut(**found[-1])

    # ------------------------------------------------------------------ reads
    @app.get("/v1/capacity", response_model=s.CapacityOut, tags=["capacity"])
    def capacity(
        _p: Reader,
        flavor: Annotated[list[s.Ident] | None, Query(max_length=200)] = None,
        by: Annotated[str, Query(pattern="^(fleet|region|cluster|pool|host)$")] = "cluster",
    ) -> s.CapacityOut:
        """How many more instances of each flavor fit, by region (IDC), cluster, pool or host."""
        names = list(flavor) if flavor else sorted(replica.flavors)
        for i, name in enumerate(names):
            if name not in replica.flavors:
                raise ApiError(
                    422, "unknown_flavor", f"flavor[{i}]: unknown flavor {name!r}", field="flavor"
                )
        t0 = time.perf_counter()
        counts = replica.capacity(names, by)
        return s.CapacityOut(
            by=by,
            flavors=names,
            counts=counts,
            hosts=replica.host_count(),
            elapsed_ms=(time.perf_counter() - t0) * 1e3,
        )

    @app.get("/v1/capacity/report", tags=["capacity"])
    def capacity_by_variant(
        _p: Reader,
        flavor: Annotated[list[s.Ident] | None, Query(max_length=200)] = None,
        by: Annotated[str, Query(pattern="^(region|idc|cluster|pool|host|flavor)$")] = "idc",
    ) -> dict[str, Any]:
        """The policy's capacity report ("remaining packages", needs `serve --policy`): for
        each base flavor and variant, how many more fit in its pool, by region, IDC, cluster,
        pool, host, or per base flavor and variant (`by=flavor`)."""
        engine = replica.engine
        if engine is None:
            raise ApiError(
                409,
                "policy_not_configured",
                "this service runs without a multi-cloud policy (berth serve --policy FILE)",
            )
        t0 = time.perf_counter()
        try:
            with replica.lock:
                report = capacity_report(
                    engine.topology,
                    engine.counter,
                    replica.clock(),
                    list(flavor) if flavor else None,
                )
                out = report.to_dict(by)
        except PolicyError as exc:
            raise ApiError(422, "invalid_input", f"flavor: {exc}", field="flavor") from None
        out["elapsed_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        return out

    @app.get("/v1/stats", response_model=list[s.StatsDay], tags=["capacity"])
    def stats(_p: Reader, days: Annotated[int, Query(ge=1, le=3660)] = 30) -> list[s.StatsDay]:
        """Placement requests per day: success rate and failures by reason (B11)."""
        return [s.StatsDay(**d) for d in store.stats(days)]

    @app.get("/v1/events", response_model=list[s.EventOut], tags=["service"])
    def events(
        _p: Reader,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        kind: Annotated[str | None, Query(max_length=32, pattern="^[a-z_]+$")] = None,
    ) -> list[s.EventOut]:
        """The append-only change log, oldest first; tail it with `after`."""
        return [s.EventOut(**e.__dict__) for e in store.events_after(after, limit, kind)]

    # ------------------------------------------------------------------ tokens
    def _token_out(row: Any, secret: str | None = None) -> s.TokenOut:
        return s.TokenOut(
            id=row.id,
            name=row.name,
            role=row.role,
            project=row.project,
            revoked=row.revoked,
            token=secret,
        )

    @app.get("/v1/tokens", response_model=list[s.TokenOut], tags=["auth"])
    def list_tokens(_p: Admin) -> list[s.TokenOut]:
        return [_token_out(t) for t in store.list_tokens()]

    @app.post("/v1/tokens", status_code=201, response_model=s.TokenOut, tags=["auth"])
    def create_token(body: s.TokenIn, _p: Admin) -> s.TokenOut:
        row, secret = store.create_token(body.name, body.role, body.project)
        return _token_out(row, secret)

    @app.delete("/v1/tokens/{token_id}", status_code=204, tags=["auth"])
    def revoke_token(token_id: s.Ident, _p: Admin) -> Response:
        """Revoke a token: at once on this replica, within `token_cache_ttl` on the others."""
        store.revoke_token(token_id)
        auth.forget(token_id)
        return Response(status_code=204)

    return app
