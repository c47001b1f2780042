"""Adds the dashboard to the service's app: its routers, its assets and its login redirect."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from berth.service.dashboard import api, assets, fleet, pages, pools
from berth.service.dashboard.session import LoginRequiredError

ROUTERS = (pages.router, pools.router, api.router)


def mount(app: FastAPI) -> None:
    """Serve the dashboard under /dashboard on the service's own port."""
    app.mount("/dashboard/static", StaticFiles(directory=assets.STATIC_DIR), name="dashboard")
    app.state.dashboard_overview = fleet.OverviewCache()
    for router in ROUTERS:
        app.include_router(router)

    @app.exception_handler(LoginRequiredError)
    async def _login(request: Request, exc: LoginRequiredError) -> Response:
        """Pages go to the login form; data routes answer 401 like the API."""
        if request.url.path.startswith("/dashboard/api/"):
            body = {"error": {"code": "unauthenticated", "message": exc.message}}
            return JSONResponse(body, status_code=401)
        return pages.to_login(request, exc.message)
