"""The API docs on the real app: Swagger UI from local assets, and bearer auth it can use."""

from __future__ import annotations

import re

from tests.service.conftest import Env


def test_docs_page_loads_swagger_ui_from_the_replica_not_a_cdn(env: Env) -> None:
    page = env.client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert {a.rsplit("/", 1)[-1] for a in assets} >= {"swagger-ui-bundle.js", "swagger-ui.css"}
    for asset in assets:
        assert asset.startswith("/"), f"{asset} is not served by the replica"
        got = env.client.get(asset)
        assert got.status_code == 200, asset
        assert len(got.content) > 1000, asset
    assert "cdn" not in page.text.lower()
    redoc = env.client.get("/redoc")
    assert redoc.status_code == 200
    for asset in re.findall(r'src="([^"]+)"', redoc.text):
        assert env.client.get(asset).status_code == 200, asset


def test_openapi_declares_bearer_auth_on_v1_routes(env: Env) -> None:
    schema = env.client.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes == {
        "HTTPBearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "`berth admin create-token` prints one.",
        }
    }
    op = schema["paths"]["/v1/hosts"]["get"]
    assert op["security"] == [{"HTTPBearer": []}]
    # the header is the scheme's, no longer an ordinary parameter Swagger UI would drop
    assert all(p["name"].lower() != "authorization" for p in op.get("parameters", []))


def test_auth_answers_are_unchanged(env: Env) -> None:
    assert env.client.get("/v1/hosts").status_code == 401
    bad = env.client.get("/v1/hosts", headers={"Authorization": "Basic abc"})
    assert bad.status_code == 401
    assert env.client.get("/v1/hosts", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert env.get("/v1/hosts").status_code == 200
    assert env.get("/v1/tokens", who="reader").status_code == 403
