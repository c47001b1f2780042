"""Idempotency-Key handling for the placing routes: the digest a claim stores, the replay.

With an `Idempotency-Key`, a retried request returns the first answer and never places twice:
the key, the request's digest and the answer are stored in the claim's own transaction
(docs/service.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fastapi.responses import JSONResponse

from berth.service.auth import Principal
from berth.service.errors import ApiError
from berth.store.repo import Store

Idempotency = tuple[str, str, str]
"""(token key, Idempotency-Key, request digest): what the claim's transaction stores."""


def idempotent(
    store: Store, p: Principal, key: str | None, payload: dict[str, Any]
) -> tuple[Idempotency | None, Any]:
    """(what the claim stores for this key, the stored answer to replay if there is one)."""
    if key is None:
        return None, None
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    stored = store.get_idempotent(p.key, key)
    if stored is None:
        return (p.key, key, digest), None
    return (p.key, key, digest), _replay(
        stored.request_hash, digest, stored.status, stored.response
    )


def replay_stored(store: Store, idem: Idempotency) -> Any:
    """The answer a concurrent request with the same key stored first."""
    stored = store.get_idempotent(idem[0], idem[1])
    assert stored is not None
    return _replay(stored.request_hash, idem[2], stored.status, stored.response)


def _replay(stored_hash: str, digest: str, status: int, response: dict[str, Any]) -> Any:
    if stored_hash != digest:
        raise ApiError(
            422,
            "idempotency_key_reused",
            "Idempotency-Key was already used with a different request body",
            field="Idempotency-Key",
        )
    return JSONResponse(response, status_code=status, headers={"Idempotent-Replayed": "true"})
