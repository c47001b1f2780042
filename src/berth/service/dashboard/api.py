"""The dashboard's data routes: the live stream, the figures its scripts refresh, its actions,
and the vendored assets from node_modules.

Actions call the API's own route functions (`berth.service.routes.defrag`) after the same role
check, so a button does exactly what the matching `/v1` request does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse

from berth.service.dashboard import assets, fleet, session, stream
from berth.service.dashboard.session import Viewer
from berth.service.errors import ApiError
from berth.service.routes import defrag as defrag_routes
from berth.service.schemas import BudgetIn, ExecuteIn, PlanIn, TargetIn

router = APIRouter(prefix="/dashboard", include_in_schema=False)


@router.get("/vendor/{name}")
def vendor(name: str) -> Response:
    """A third-party asset from node_modules (Chart.js), or 404 saying how to install it."""
    path = assets.vendor_file(name)
    if path is None:
        return JSONResponse(
            {"error": {"code": "not_found", "message": f"{name}: {assets.INSTALL_HINT}"}},
            status_code=404,
        )
    return FileResponse(
        path, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"}
    )


@router.get("/api/overview")
def overview_data(
    request: Request, p: Viewer, family: Annotated[str | None, Query(max_length=64)] = None
) -> dict[str, Any]:
    """The overview's figures as JSON (the page's script refreshes from this)."""
    session.need_fleet(p)
    replica = request.app.state.replica
    names = sorted(replica.flavors)
    flavors = fleet.default_flavors(names, family)
    tree = request.app.state.dashboard_overview.get(replica, flavors)
    return {"flavors": flavors, "tree": tree.to_dict()}


@router.get("/api/stats")
def stats_data(
    request: Request, p: Viewer, days: Annotated[int, Query(ge=1, le=3660)] = 30
) -> list[dict[str, Any]]:
    """Placements per day, success rate and failures by reason (as `GET /v1/stats`)."""
    session.need_fleet(p)
    return request.app.state.store.stats(days)


@router.get("/api/stream")
async def decisions(
    request: Request,
    p: Viewer,
    after: Annotated[str | None, Query(max_length=64)] = None,
    seconds: Annotated[float, Query(ge=0, le=3600)] = 300.0,
) -> StreamingResponse:
    """Server-sent events: decisions (a tenant's own project's only) and fleet changes."""
    if p.role == "group-admin":
        raise ApiError(403, "forbidden", "a group-admin token can only use its elastic group")
    store = request.app.state.store
    project = p.visible_project()
    start = stream.parse_cursor(request.headers.get("last-event-id")) or stream.parse_cursor(after)
    if start is None:
        start = stream.cursor(store, project)
    body = stream.events(
        request,
        store,
        start,
        project=project,
        fleet=session.can_read_fleet(p),
        seconds=seconds,
    )
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


# ---------------------------------------------------------------------------- defrag
@router.get("/api/defrag/{plan_id}")
def plan_data(request: Request, p: Viewer, plan_id: str) -> dict[str, Any]:
    session.need_fleet(p)
    service = request.app.state.defrag
    plan = defrag_routes.get_plan(plan_id, p, service)
    return plan.model_dump(mode="json")


@router.post("/api/defrag")
async def create_plan(request: Request, p: Viewer) -> dict[str, Any]:
    """A plan for a cluster: restore capacity for the flavors named (or empty hosts)."""
    session.check_action(request)
    session.need_fleet(p, write=True)
    raw = await request.json()
    if not isinstance(raw, dict):
        raise ApiError(422, "invalid_input", "body: a JSON object is needed")
    try:
        body = PlanIn(
            cluster=raw.get("cluster", ""),
            target=TargetIn(
                objective=raw.get("objective", "capacity"), flavors=raw.get("flavors") or []
            ),
            budget=BudgetIn(
                max_migrations=int(raw.get("max_migrations", 10)),
                max_concurrent=int(raw.get("max_concurrent", 1)),
            ),
        )
    except (ValueError, TypeError) as exc:
        raise ApiError(422, "invalid_input", str(exc).splitlines()[0]) from None
    service = request.app.state.defrag
    plan = defrag_routes.create_plan(body, p, service)
    return plan.model_dump(mode="json")


@router.post("/api/defrag/{plan_id}/{action}")
def plan_action(
    request: Request,
    p: Viewer,
    plan_id: str,
    action: Literal["execute", "pause", "resume", "cancel"],
    auto_confirm: bool = False,
) -> dict[str, Any]:
    """Start (execute), pause, resume or cancel a plan: operator and admin only."""
    session.check_action(request)
    session.need_fleet(p, write=True)
    service, clouds = request.app.state.defrag, request.app.state.clouds
    if action == "execute":
        out = defrag_routes.execute_plan(
            plan_id, p, service, clouds, ExecuteIn(auto_confirm=auto_confirm)
        )
    elif action == "pause":
        out = defrag_routes.pause_plan(plan_id, p, service)
    elif action == "resume":
        out = defrag_routes.resume_plan(plan_id, p, service)
    else:
        out = defrag_routes.cancel_plan(plan_id, p, service)
    return out.model_dump(mode="json")
