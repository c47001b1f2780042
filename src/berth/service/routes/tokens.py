"""API tokens (admin only): list, create, revoke."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from berth.service import schemas as s
from berth.service.deps import Admin, AuthDep, StoreDep

router = APIRouter(prefix="/v1", tags=["auth"])


def _token_out(row: Any, secret: str | None = None) -> s.TokenOut:
    return s.TokenOut(
        id=row.id,
        name=row.name,
        role=row.role,
        project=row.project,
        revoked=row.revoked,
        expires_at=row.expires_at,
        hosts=list(row.hosts),
        vm=row.vm,
        elastic_group=row.elastic_group,
        token=secret,
    )


@router.get("/tokens", response_model=list[s.TokenOut])
def list_tokens(_p: Admin, store: StoreDep) -> list[s.TokenOut]:
    return [_token_out(t) for t in store.list_tokens()]


@router.post("/tokens", status_code=201, response_model=s.TokenOut)
def create_token(body: s.TokenIn, _p: Admin, store: StoreDep) -> s.TokenOut:
    ttl = None if body.ttl_seconds is None else float(body.ttl_seconds)
    row, secret = store.create_token(
        body.name,
        body.role,
        body.project,
        ttl=ttl,
        hosts=tuple(body.hosts),
        vm=body.vm,
        elastic_group=body.elastic_group,
    )
    return _token_out(row, secret)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: s.Ident, _p: Admin, store: StoreDep, auth: AuthDep) -> Response:
    """Revoke a token: at once on this replica, within `token_cache_ttl` on the others."""
    store.revoke_token(token_id)
    auth.forget(token_id)
    return Response(status_code=204)
