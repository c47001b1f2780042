"""Idempotency-Key handling for the placing routes: the digest a claim stores, the replay.

With an `Idempotency-Key`, a retried request returns the first answer and never places twice:
the key, the request's digest and the answer are stored in the claim's own transaction
(docs/service.md, "Idempotency"). Requests with one key run one at a time on a replica
(`one_at_a_time`); across replicas, a request that fails while another with its key committed
returns that answer (`committed_answer`), never the failure.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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


class _KeyLocks:
    """One lock per (token, key) in use, dropped when its last user leaves."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], tuple[threading.Lock, int]] = {}

    @contextmanager
    def held(self, who: tuple[str, str]) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(who, (threading.Lock(), 0))
            self._locks[who] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[who]
                if users == 1:
                    del self._locks[who]
                else:
                    self._locks[who] = (lock, users - 1)


_KEYS = _KeyLocks()


@contextmanager
def one_at_a_time(p: Principal, key: str | None) -> Iterator[None]:
    """Run the requests of this replica with one Idempotency-Key one after the other: the
    second then finds the first's stored answer instead of racing it for the same capacity."""
    if key is None:
        yield
        return
    with _KEYS.held((p.key, key)):
        yield


def committed_answer(store: Store, idem: Idempotency | None) -> Any:
    """After a failed placement: the answer a concurrent request with the same key (on another
    replica) committed, to return instead of the failure; None when there is none."""
    if idem is None:
        return None
    stored = store.get_idempotent(idem[0], idem[1])
    if stored is None:
        return None
    return _replay(stored.request_hash, idem[2], stored.status, stored.response)


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
