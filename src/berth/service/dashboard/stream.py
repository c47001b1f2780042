"""The live decision stream: server-sent events tailing the placement outcome log and the
event log.

Each placement decision (a success with its chosen hosts, a failure with its explanation, "0/N
hosts fit: ...") is a row of `placement_outcomes`, written in the claim's own transaction or
with the failure; each change to the fleet is an event of the append-only event log. The stream
polls both from the store (any replica's decisions show, not only this one's) and sends:

* `decision` (id `o:e`, so a reconnecting EventSource resumes with Last-Event-ID): one decision,
  with its compact why this host when one was recorded (`why`, `why_line`; docs/why.md);
* `change` (fleet readers only): the event log moved to this id; pages refresh their figures.

A tenant sees its own project's decisions only, and no `change` events. A stream closes after
`seconds` (the browser's EventSource reconnects on its own), so no request is held forever.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from berth.core.why import DRAWS
from berth.store.repo import OutcomeRow, Store

POLL_S = 0.25
KEEPALIVE_S = 15.0
BATCH = 200


def decision(row: OutcomeRow) -> dict[str, Any]:
    """A decision as the page shows it (plain JSON data)."""
    d = asdict(row)
    d["count"] = d.pop("num_instances")
    d["why_line"] = why_line(row.why)
    return d


def why_line(why: dict[str, Any] | None) -> str | None:
    """The one line a collapsed why shows: the first instance's deciding weigher and margin,
    or its kind of draw (`placing.why_record`'s compact form; None without one)."""
    if not why or not why.get("instances"):
        return None
    first = why["instances"][0]
    if first.get("decided_by") is not None:
        text = f"decided by {first['decided_by']}, margin {first['margin']:.6g}"
        if first.get("needed") is False:
            text += " (the winner leads without it too)"
    elif first.get("draw") == "tie":
        text = f"{first['tied']}-way tie for the best score, drawn with seed {first['seed']}"
    else:
        text = DRAWS.get(str(first.get("draw")), str(first.get("draw")))
    total = int(why.get("instances_total", 1))
    return text if total == 1 else f"{text} (instance 1 of {total})"


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    """`o:e` (outcome id, event id) from Last-Event-ID or `after`; None if absent or bad."""
    if not text:
        return None
    left, _, right = text.partition(":")
    if not (left.isdigit() and right.isdigit()):
        return None
    return int(left), int(right)


def cursor(store: Store, project: str | None) -> tuple[int, int]:
    """Where a new stream starts: after the newest decision and event."""
    last = store.recent_outcomes(1, project)
    return (last[-1].id if last else 0), store.latest_event_id()


def frame(kind: str, data: dict[str, Any], ident: str | None = None) -> str:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def events(
    request: Request,
    store: Store,
    start: tuple[int, int],
    *,
    project: str | None,
    fleet: bool,
    seconds: float,
) -> AsyncIterator[str]:
    """The stream's frames from `start` (outcome id, event id) for at most `seconds`."""
    seen_o, seen_e = start
    ends = time.monotonic() + seconds
    quiet_since = time.monotonic()
    yield "retry: 1000\n\n"
    while True:
        rows = await run_in_threadpool(store.outcomes_after, seen_o, BATCH, project)
        latest = await run_in_threadpool(store.latest_event_id) if fleet else seen_e
        moved = bool(rows) or latest > seen_e
        for row in rows:
            seen_o = row.id
            yield frame("decision", decision(row), f"{seen_o}:{seen_e}")
        if latest > seen_e:
            seen_e = latest
            yield frame("change", {"event": latest}, f"{seen_o}:{seen_e}")
        now = time.monotonic()
        if moved:
            quiet_since = now
        elif now - quiet_since > KEEPALIVE_S:
            quiet_since = now
            yield ": keep-alive\n\n"
        if now >= ends or await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
