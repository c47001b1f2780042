"""Open routes for probes and scrapers: `/healthz` and `/metrics` (no token)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from berth.service import schemas as s
from berth.service.deps import ConfigDep, MetricsDep, ReplicaDep, StoreDep
from berth.service.errors import ApiError

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=s.Health)
def healthz(config: ConfigDep, store: StoreDep, replica: ReplicaDep) -> s.Health:
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


@router.get("/metrics", response_class=Response)
def prometheus(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
