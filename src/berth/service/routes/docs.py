"""Open routes for people: the API docs `/docs` (Swagger UI) and `/redoc`, assets served locally.

FastAPI's own pages load their JavaScript from a CDN, so they are blank without internet. The
assets come from the pinned `fastapi-offline` package (its `static/` directory ships
swagger-ui-dist's bundle and CSS and ReDoc's standalone script); `mount_assets` serves them under
`/docs/assets` and the pages are FastAPI's `get_swagger_ui_html` / `get_redoc_html` pointed at
them. Swagger UI's Authorize button comes from the bearer scheme `berth.service.deps` declares.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

router = APIRouter(include_in_schema=False)

ASSETS_URL = "/docs/assets"
ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
"""swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js and favicon.png."""


def mount_assets(app: FastAPI) -> None:
    """Serve the assets; the app is built with `docs_url=None, redoc_url=None`."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        swagger_ui_parameters={"persistAuthorization": True},
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    )
