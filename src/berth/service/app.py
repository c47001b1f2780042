"""The FastAPI application factory: builds one replica's shared objects and wires the routers.

`create_app(config)` builds one replica: a `Store` on the configured database, a `Replica`
holding the per-cluster tables, and (unless `background=False`, as in tests that drive sync by
hand) the threads that keep the tables current (`berth.service.sync`), carry defrag plans out
(`berth.service.defrag`) and, when `elastic_loop` builds one, run the elastic pools' control
loop (`berth.service.elastic.loop`). Routes live in `berth.service.routes`, one module per
resource; they reach these objects through `berth.service.deps`; errors become JSON through
`berth.service.errors`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from berth.core import jit
from berth.service.auth import Authenticator
from berth.service.clouds.registry import DriverFactory, make_driver
from berth.service.clouds.service import CloudService
from berth.service.config import ServiceConfig
from berth.service.dashboard.mount import mount as mount_dashboard
from berth.service.defrag import DefragService, DefragThread
from berth.service.elastic.loop import ElasticLoop
from berth.service.elastic.metrics import ElasticMetrics
from berth.service.errors import ERROR_RESPONSES, install_handlers
from berth.service.limits import RequestGuard
from berth.service.metrics import Metrics
from berth.service.policy_topology import attach_policy
from berth.service.replica import Replica
from berth.service.routes import (
    capacity,
    catalogue,
    defrag,
    deployment_sets,
    docs,
    elastic,
    elastic_agent,
    events,
    health,
    hosts,
    instances,
    placements,
    schedule,
    tokens,
    topology,
    why_not,
)
from berth.service.shared_routes import include_routers
from berth.service.sync import SyncThread
from berth.store.repo import Store

ROUTERS = (
    defrag.router,
    health.router,
    topology.router,
    hosts.router,
    catalogue.router,
    deployment_sets.router,
    placements.router,
    schedule.router,
    instances.router,
    capacity.router,
    why_not.router,
    events.router,
    tokens.router,
    elastic.router,
    elastic_agent.router,
    docs.router,
)
"""Every router, in the order /openapi.json lists their paths."""


def create_app(
    config: ServiceConfig,
    *,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    background: bool = True,
    simulate_heartbeats: bool = False,
    elastic_loop: Callable[[Replica, ElasticMetrics, CloudService], ElasticLoop] | None = None,
    drivers: DriverFactory = make_driver,
) -> FastAPI:
    jit.prepare()  # the first placement does not wait for the engine's compiled kernels
    store = store or Store.open(config.db_url, replica=config.replica_id)
    replica = Replica(store, config, clock)
    attach_policy(replica)
    replica.reload()
    metrics = Metrics(replica)
    sync = SyncThread(replica, simulate_heartbeats=simulate_heartbeats, registry=metrics.registry)
    defrag_service = DefragService(replica, metrics.registry)
    defrag_driver = DefragThread(defrag_service, config.poll_interval * 2)
    elastic_metrics = ElasticMetrics(metrics.registry, store)
    clouds = CloudService(replica, defrag_service, drivers, background=background)
    clouds.start()
    loop = None if elastic_loop is None else elastic_loop(replica, elastic_metrics, clouds)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if background:
            sync.start()
            defrag_driver.start()
            if loop is not None:
                loop.start()
            clouds.run()
        yield
        clouds.close()
        if background:
            if loop is not None:
                loop.close()
            defrag_driver.close()
            sync.close()

    app = FastAPI(
        title="Berth",
        version="1",
        description="VM placement and capacity control plane. Every /v1 route needs "
        "`Authorization: Bearer <token>`. Errors: `{error: {code, message, field, details}}`.",
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
        docs_url=None,  # routes/docs.py serves both pages from local assets
        redoc_url=None,
    )
    docs.mount_assets(app)
    mount_dashboard(app)  # /dashboard: docs/dashboard.md
    app.state.config = config
    app.state.replica = replica
    app.state.store = store
    app.state.metrics = metrics
    app.state.sync = sync
    app.state.auth = Authenticator(store, config.token_cache_ttl)
    app.state.defrag = defrag_service
    app.state.elastic = loop
    app.state.elastic_metrics = elastic_metrics
    app.state.clouds = clouds
    include_routers(app, ROUTERS)  # built by the process's first app, shared by the others
    install_handlers(app)
    app.add_middleware(RequestGuard, auth=app.state.auth, max_body_bytes=config.max_body_bytes)
    return app
