"""The elastic pools' page: groups with their quotas and live VMs by state, the global limits,
and VM-hours per day and group (the accounting `GET /v1/elastic/accounting` answers).

A group-admin sees its own group only, as on the elastic API. Later parts (demand against VMs
over time, tidal power) slot in as further sections fed by the same store reads.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.elastic.accounting import Rates
from berth.service.dashboard import session
from berth.service.dashboard.pages import page, refused
from berth.service.dashboard.session import Viewer
from berth.service.errors import ApiError
from berth.service.routes.elastic import LIVE, usage_rows

router = APIRouter(prefix="/dashboard", include_in_schema=False)


@router.get("/elastic")
def elastic_page(request: Request, p: Viewer) -> Response:
    try:
        session.need_elastic(p)
    except ApiError as exc:
        return refused(request, p, exc)
    store, replica = request.app.state.store, request.app.state.replica
    only = p.elastic_group if p.role == "group-admin" else None
    groups = [g for g in store.list_elastic_groups() if only is None or g.name == only]
    vms = store.list_vms(only, LIVE)
    by_group: dict[str, dict[str, int]] = {}
    for vm in vms:
        states = by_group.setdefault(vm.group, {})
        states[vm.state.value] = states.get(vm.state.value, 0) + 1
    rows = usage_rows(store, replica, only, replica.clock(), Rates(0.0, 1.0, 0.0))
    hours: dict[str, dict[str, float]] = {}
    for r in rows:
        day = hours.setdefault(r.day, {})
        day[r.group] = day.get(r.group, 0.0) + r.vm_hours
    limits = store.elastic_limits()
    return page(
        request,
        p,
        "elastic.html",
        "elastic",
        groups=[_group(g, by_group.get(g.name, {})) for g in groups],
        limits=limits,
        vms=vms[:200],
        vm_total=len(vms),
        hours=hours,
    )


def _group(g: Any, states: dict[str, int]) -> dict[str, Any]:
    s = g.spec
    return {
        "name": s.name,
        "flavor": s.flavor,
        "min_vms": s.min_vms,
        "max_vms": s.max_vms,
        "max_cores": s.max_cores,
        "share": s.share,
        "cluster": g.cluster,
        "queue": s.queue.system.value,
        "states": states,
        "live": sum(states.values()),
    }
