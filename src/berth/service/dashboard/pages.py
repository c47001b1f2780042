"""The dashboard's HTML pages (server-rendered; their scripts then follow the live stream).

Fleet pages (overview, cluster, host, heatmap, defrag) need a role that reads the fleet, as the
API's fleet reads do; placements and instances are open to tenants, scoped to their project;
the elastic page follows the elastic API's rules (a group-admin sees its own group).
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from berth.service.auth import Principal
from berth.service.dashboard import assets, fleet, hosts, session, stream
from berth.service.dashboard.session import Viewer
from berth.service.errors import ApiError
from berth.service.replica import Replica
from berth.service.routes.defrag import plan_out
from berth.store.errors import NotFoundError
from berth.store.repo import Store

router = APIRouter(prefix="/dashboard", include_in_schema=False)
templates = Jinja2Templates(directory=assets.TEMPLATES_DIR)

MAX_ROWS = 60
"""Above this many pools, the overview and heatmaps show clusters (pools are a click away)."""

NAV = (
    ("overview", "Overview", "/dashboard/", session.can_read_fleet),
    ("heatmap", "Heatmap", "/dashboard/heatmap", session.can_read_fleet),
    ("placements", "Placements", "/dashboard/placements", lambda p: p.role != "group-admin"),
    ("defrag", "Defrag", "/dashboard/defrag", session.can_read_fleet),
    ("elastic", "Elastic pools", "/dashboard/elastic", session.can_see_elastic),
    ("instances", "Instances", "/dashboard/instances", lambda p: p.role != "group-admin"),
)


def _state(request: Request) -> tuple[Store, Replica]:
    return request.app.state.store, request.app.state.replica


def page(
    request: Request, p: Principal | None, name: str, active: str, status: int = 200, **data: Any
) -> HTMLResponse:
    """Render a page with what every page needs (who, the menu, the assets' state)."""
    context = {
        "who": p,
        "nav": [n for n in NAV if p is not None and n[3](p)],
        "active": active,
        "vendor_ok": assets.node_modules() is not None,
        "install_hint": assets.INSTALL_HINT,
        "can_change": p is not None and session.can_change_fleet(p),
        "now": time.time(),
        "before_after": before_after,
        **data,
    }
    return templates.TemplateResponse(request, name, context, status_code=status)


def before_after(plan: Any) -> list[tuple[str, Any, Any]]:
    """A plan's planned figures as (label, before, after) rows, per-flavor maps flattened
    ("capacity c3.4xlarge.numa1", 67, 75)."""
    rows: list[tuple[str, Any, Any]] = []
    after = plan.after or {}
    for key, value in (plan.before or {}).items():
        if isinstance(value, dict):
            later = after.get(key) or {}
            rows += [(f"{key} {k}", v, later.get(k)) for k, v in value.items()]
        else:
            rows.append((key, value, after.get(key)))
    return rows


def refused(request: Request, p: Principal, exc: ApiError) -> HTMLResponse:
    return page(request, p, "error.html", "", exc.status, message=exc.message)


# ---------------------------------------------------------------------------- login
@router.get("/login")
def login_form(request: Request, next: str = "/dashboard/", error: str = "") -> HTMLResponse:
    return page(request, None, "login.html", "login", next=_safe_next(next), error=error)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the posted token with the service's Authenticator; keep it in the cookie."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or ["/dashboard/"])[0])
    try:
        await session.check(request.app.state.auth, f"Bearer {token}")
    except session.LoginRequiredError as exc:
        return page(request, None, "login.html", "login", 401, next=target, error=exc.message)
    out = RedirectResponse(target, status_code=303)
    secure = request.url.scheme == "https"
    out.set_cookie(
        session.COOKIE, token, httponly=True, samesite="strict", path=session.PATH, secure=secure
    )
    return out


@router.post("/logout")
def logout() -> Response:
    out = RedirectResponse("/dashboard/login", status_code=303)
    out.delete_cookie(session.COOKIE, path=session.PATH)
    return out


def _safe_next(target: str) -> str:
    """Only a dashboard path (no open redirect to another site)."""
    if target.startswith("/dashboard") and not target.startswith("//"):
        return target
    return "/dashboard/"


def to_login(request: Request, message: str) -> RedirectResponse:
    where = quote(str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))
    return RedirectResponse(
        f"/dashboard/login?next={where}&error={quote(message)}", status_code=303
    )


# ---------------------------------------------------------------------------- fleet
def _flavors(replica: Replica, family: str | None) -> tuple[list[str], list[str]]:
    names = sorted(replica.flavors)
    return fleet.default_flavors(names, family), fleet.families(names)


@router.get("/")
def overview(
    request: Request,
    p: Viewer,
    family: Annotated[str | None, Query(max_length=64)] = None,
    all_pools: Annotated[bool, Query(alias="pools")] = False,
) -> Response:
    """The fleet; pools are listed when there are at most MAX_ROWS (else on each cluster's
    page, or with `?pools=true`)."""
    if p.role == "tenant":
        return RedirectResponse("/dashboard/placements", status_code=303)
    if p.role == "group-admin":
        return RedirectResponse("/dashboard/elastic", status_code=303)
    _, replica = _state(request)
    flavors, fams = _flavors(replica, family)
    t0 = time.perf_counter()
    tree = request.app.state.dashboard_overview.get(replica, flavors)
    pools = sum(len(c.children) for r in tree.children for i in r.children for c in i.children)
    return page(
        request,
        p,
        "overview.html",
        "overview",
        tree=tree,
        show_pools=pools <= MAX_ROWS or all_pools,
        pools=pools,
        flavors=flavors,
        families=fams,
        family=family or "",
        elapsed_ms=(time.perf_counter() - t0) * 1e3,
        draining=len(replica.draining),
    )


@router.get("/clusters/{name}")
def cluster_page(
    request: Request,
    p: Viewer,
    name: str,
    pool: Annotated[str | None, Query(max_length=255)] = None,
    page_no: Annotated[int, Query(alias="page", ge=0, le=1_000_000)] = 0,
    family: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    try:
        session.need_fleet(p)
    except ApiError as exc:
        return refused(request, p, exc)
    _, replica = _state(request)
    flavors, fams = _flavors(replica, family)
    found = hosts.cluster_hosts(replica, name, flavors, pool=pool, page=page_no)
    if found is None:
        return refused(request, p, ApiError(404, "not_found", f"no active cluster {name!r}"))
    pools = sorted({r.name for r in replica.pools() if r.cluster == name})
    tree = request.app.state.dashboard_overview.get(replica, flavors)
    summary = [c for r in tree.children for i in r.children for c in i.children if c.name == name]
    return page(
        request,
        p,
        "cluster.html",
        "overview",
        cluster=found,
        pools=pools,
        summary=summary[0] if summary else None,
        flavors=flavors,
        families=fams,
        family=family or "",
    )


@router.get("/hosts/{name}")
def host_page(request: Request, p: Viewer, name: str) -> Response:
    try:
        session.need_fleet(p)
    except ApiError as exc:
        return refused(request, p, exc)
    store, replica = _state(request)
    detail = hosts.host_detail(replica, name, sorted(replica.flavors))
    if detail is None:
        return refused(request, p, ApiError(404, "not_found", f"no host {name!r}"))
    instances = store.list_instances(host=name, limit=500)
    fits = {f: n for f, n in detail["capacity"].items() if n > 0}
    return page(request, p, "host.html", "overview", host=detail, instances=instances, fits=fits)


@router.get("/heatmap")
def heatmap_page(
    request: Request,
    p: Viewer,
    flavor: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    try:
        session.need_fleet(p)
    except ApiError as exc:
        return refused(request, p, exc)
    _, replica = _state(request)
    names = sorted(replica.flavors)
    if flavor not in replica.flavors:
        flavor = _largest(replica)
    t0 = time.perf_counter()
    by_cluster = len(replica.pools()) > MAX_ROWS
    free = hosts.heatmap(replica, "free", None, by_cluster=by_cluster)
    frag = hosts.heatmap(replica, "fragmentation", flavor, by_cluster=by_cluster)
    return page(
        request,
        p,
        "heatmap.html",
        "heatmap",
        free=free,
        frag=frag,
        flavor=flavor,
        flavors=names,
        buckets=hosts.BUCKETS,
        elapsed_ms=(time.perf_counter() - t0) * 1e3,
    )


def _largest(replica: Replica) -> str | None:
    """The flavor with the most vCPUs (ties by name): the one fragmentation hurts first."""
    if not replica.flavors:
        return None
    return max(sorted(replica.flavors), key=lambda n: replica.flavors[n].vcpus)


# ---------------------------------------------------------------------------- placements
@router.get("/placements")
def placements_page(request: Request, p: Viewer) -> Response:
    if p.role == "group-admin":
        return refused(
            request, p, ApiError(403, "forbidden", "a group-admin token sees no placements")
        )
    store, _ = _state(request)
    project = p.visible_project()
    recent = [stream.decision(r) for r in store.recent_outcomes(50, project)]
    o, e = stream.cursor(store, project)
    stats = store.stats(30) if session.can_read_fleet(p) else None
    return page(
        request,
        p,
        "placements.html",
        "placements",
        recent=recent,
        cursor=f"{o}:{e}",
        stats=stats,
        project=project,
    )


@router.get("/instances")
def instances_page(
    request: Request,
    p: Viewer,
    after: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    """Instances a page at a time (a tenant's own project only, as `GET /v1/instances`)."""
    if p.role == "group-admin":
        return refused(
            request, p, ApiError(403, "forbidden", "a group-admin token sees no instances")
        )
    store, _ = _state(request)
    rows = store.list_instances(project=p.visible_project(), limit=101, after=after)
    more = len(rows) > 100
    rows = rows[:100]
    return page(
        request,
        p,
        "instances.html",
        "instances",
        instances=rows,
        next_after=rows[-1].id if more and rows else None,
        project=p.visible_project(),
    )


# ---------------------------------------------------------------------------- defrag
@router.get("/defrag")
def defrag_page(request: Request, p: Viewer) -> Response:
    try:
        session.need_fleet(p)
    except ApiError as exc:
        return refused(request, p, exc)
    _, replica = _state(request)
    service = request.app.state.defrag
    plans = [
        plan_out(pl, service.store.steps(pl.id), with_steps=False)
        for pl in service.store.list_plans()
    ]
    plans.reverse()  # newest first
    clusters = sorted(n for n, v in replica.clusters.items() if v.state == "active")
    return page(
        request,
        p,
        "defrag.html",
        "defrag",
        plans=plans,
        clusters=clusters,
        draining=sorted(replica.draining),
        flavors=sorted(replica.flavors),
        default_flavor=_largest(replica),
    )


@router.get("/defrag/{plan_id}")
def plan_page(request: Request, p: Viewer, plan_id: str) -> Response:
    try:
        session.need_fleet(p)
    except ApiError as exc:
        return refused(request, p, exc)
    service = request.app.state.defrag
    try:
        plan = plan_out(service.store.get_plan(plan_id), service.store.steps(plan_id))
    except NotFoundError:
        return refused(request, p, ApiError(404, "not_found", f"no defrag plan {plan_id!r}"))
    return page(request, p, "plan.html", "defrag", plan=plan)
