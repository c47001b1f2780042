"""The append-only change log, `/v1/events`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from berth.service import schemas as s
from berth.service.deps import Reader, StoreDep

router = APIRouter(prefix="/v1", tags=["service"])


@router.get("/events", response_model=list[s.EventOut])
def events(
    _p: Reader,
    store: StoreDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    kind: Annotated[str | None, Query(max_length=32, pattern="^[a-z_]+$")] = None,
) -> list[s.EventOut]:
    """The append-only change log, oldest first; tail it with `after`."""
    return [s.EventOut(**e.__dict__) for e in store.events_after(after, limit, kind)]
