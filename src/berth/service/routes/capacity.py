"""Capacity reads: how many more of each flavor fit, the policy's report, daily statistics."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from berth.policy.capacity import capacity_report
from berth.policy.errors import MultiCloudInputError
from berth.service import schemas as s
from berth.service.deps import Reader, ReplicaDep, StoreDep
from berth.service.errors import ApiError, policy_not_configured
from berth.service.policy_topology import policy_engine

router = APIRouter(prefix="/v1", tags=["capacity"])


@router.get("/capacity", response_model=s.CapacityOut)
def capacity(
    _p: Reader,
    replica: ReplicaDep,
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


@router.get("/capacity/report")
def capacity_by_variant(
    _p: Reader,
    replica: ReplicaDep,
    flavor: Annotated[list[s.Ident] | None, Query(max_length=200)] = None,
    by: Annotated[str, Query(pattern="^(region|idc|cluster|pool|host|flavor)$")] = "idc",
) -> dict[str, Any]:
    """The policy's capacity report ("remaining packages", needs `serve --policy`): for
    each base flavor and variant, how many more fit in its pool, by region, IDC, cluster,
    pool, host, or per base flavor and variant (`by=flavor`)."""
    engine = policy_engine(replica)
    if engine is None:
        raise policy_not_configured()
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
    except MultiCloudInputError as exc:
        raise ApiError(422, "invalid_input", f"flavor: {exc}", field="flavor") from None
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return out


@router.get("/stats", response_model=list[s.StatsDay])
def stats(
    _p: Reader, store: StoreDep, days: Annotated[int, Query(ge=1, le=3660)] = 30
) -> list[s.StatsDay]:
    """Placement requests per day: success rate and failures by reason (B11)."""
    return [s.StatsDay(**d) for d in store.stats(days)]
