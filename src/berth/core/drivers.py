"""Scheduler drivers: chance, filter and caching (A1).

* ``chance`` and ``filter`` decide over a table they are handed (`FilterScheduler`).
* ``caching`` owns a table, keeps it exact by applying change events (`events`), and claims its
  own decisions in it; `refresh` swaps in a freshly loaded table (the periodic full
  reconciliation the service drives).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.events import (
    Event,
    Heartbeat,
    HostAdded,
    HostStateChanged,
    InstanceClaimed,
    InstanceReleased,
)
from berth.core.request import RequestSpec
from berth.core.table import HostTable


class Applied(Enum):
    APPLIED = "applied"
    STALE = "stale"  # not newer than what the cache has: ignored
    GAP = "gap"  # generations were skipped: the cache needs a refresh


class CachingScheduler:
    """A filter scheduler over a host-state cache kept current by events."""

    def __init__(self, scheduler: FilterScheduler, table: HostTable) -> None:
        self.scheduler = scheduler
        self.table = table
        self.needs_refresh = False

    def schedule(self, request: RequestSpec, now: float) -> Decision:
        """Decide and claim in the cache (the caller persists the decision)."""
        decision = self.scheduler.select_destinations(self.table, request, now)
        commit(self.table, decision)
        return decision

    def apply(self, event: Event) -> Applied:
        table = self.table
        if isinstance(event, Heartbeat):
            newer = table.set_heartbeat(event.host, event.timestamp)
            return Applied.APPLIED if newer else Applied.STALE
        if isinstance(event, HostAdded):
            if event.host.name in table.index:
                return Applied.STALE
            table.add_hosts([event.host], event.aggregate_metadata)
            return Applied.APPLIED
        row = table.row(event.host)
        current = int(table.generation[row])
        if event.generation <= current:
            return Applied.STALE
        if event.generation > current + 1:
            self.needs_refresh = True
            return Applied.GAP
        if isinstance(event, InstanceClaimed):
            table.claim(
                event.instance_id,
                event.host,
                event.flavor,
                event.cell_use,
                event.host_use,
                server_group=event.server_group,
                project=event.project,
            )
        elif isinstance(event, InstanceReleased):
            table.release(event.instance_id)
        elif isinstance(event, HostStateChanged):
            table.set_enabled(event.host, event.enabled)
        return Applied.APPLIED

    def refresh(self, load: Callable[[], HostTable]) -> None:
        """Replace the cache with a freshly loaded table (full reconciliation)."""
        self.table = load()
        self.needs_refresh = False
