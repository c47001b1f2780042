"""Hosts: add, list, decommission, enable and disable; compute reports and reconciliation.

Marking a host for drain is a defrag route (`berth.service.routes.defrag`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from berth.core.model import Host
from berth.service import schemas as s
from berth.service.deps import ConfigDep, Operator, Reader, ReplicaDep, Reporter, StoreDep
from berth.service.errors import ApiError
from berth.service.replica import Replica

router = APIRouter(prefix="/v1", tags=["hosts"])


def _host_out(replica: Replica, rec: Any) -> s.HostOut:
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


@router.get("/hosts", response_model=list[s.HostOut])
def list_hosts(
    _p: Reader, store: StoreDep, replica: ReplicaDep, cluster: s.Ident | None = None
) -> list[s.HostOut]:
    return [_host_out(replica, r) for r in store.list_hosts(cluster)]


@router.post("/hosts", status_code=201, response_model=s.HostOut)
def add_host(body: s.HostIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.HostOut:
    data = body.model_dump(exclude={"cluster", "pool"})
    try:
        host = Host.model_validate(data)
    except ValueError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None
    store.add_hosts(body.cluster, [(host, body.pool)])
    replica.sync()
    return _host_out(replica, store.get_host(body.name))


@router.get("/hosts/{name}", response_model=s.HostOut)
def get_host(name: s.Ident, _p: Reader, store: StoreDep, replica: ReplicaDep) -> s.HostOut:
    return _host_out(replica, store.get_host(name))


@router.delete("/hosts/{name}", status_code=204)
def remove_host(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> Response:
    """Decommission a host that runs nothing (409 `in_use` otherwise)."""
    store.remove_host(name)
    replica.sync()
    return Response(status_code=204)


@router.post("/hosts/{name}/enable", response_model=s.HostOut)
def enable_host(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.HostOut:
    replica.set_enabled(name, True)
    return _host_out(replica, store.get_host(name))


@router.post("/hosts/{name}/disable", response_model=s.HostOut)
def disable_host(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.HostOut:
    replica.set_enabled(name, False)
    return _host_out(replica, store.get_host(name))


@router.post("/hosts/{name}/reports", response_model=s.ReportOut)
def report(
    name: s.Ident,
    body: s.ReportIn,
    _p: Reporter,
    config: ConfigDep,
    store: StoreDep,
    replica: ReplicaDep,
) -> s.ReportOut:
    """A compute node's heartbeat and view; an older report never overwrites a newer one.

    A timestamp more than `max_clock_skew` seconds ahead of this replica's clock is refused
    (422 on `timestamp`): kept, it would hide every later real report and the host would never
    be counted down (docs/service.md, "Compute reports, heartbeats and reconciliation").
    """
    now = replica.clock()
    _check_timestamp(body.timestamp, now, config.max_clock_skew)
    view = None
    if body.instances is not None or body.used is not None:
        view = {"instances": body.instances, "used": body.used}
    applied = store.report(
        name,
        body.timestamp,
        view,
        down_after=config.service_down_time,
        not_after=now + config.max_clock_skew,  # an older poisoned row gives way (see store)
    )
    if applied:
        replica.heartbeat(name, body.timestamp)
    rec = store.get_host(name)
    return s.ReportOut(applied=applied, host=name, last_heartbeat=rec.host.last_heartbeat)


def _check_timestamp(timestamp: float, now: float, skew: float) -> None:
    if timestamp > now + skew:
        raise ApiError(
            422,
            "invalid_input",
            f"timestamp: {timestamp} is more than {skew:g} s ahead of the service's clock ({now})",
            field="timestamp",
        )


@router.post("/reconcile", response_model=list[s.EventOut])
def reconcile(_p: Operator, store: StoreDep) -> list[s.EventOut]:
    """Compare reported instances with known ones now; returns the discrepancy events."""
    return [s.EventOut(**e.__dict__) for e in store.reconcile()]
