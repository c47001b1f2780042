"""The background thread that keeps a replica's tables current (docs/service.md).

LISTEN/NOTIFY on PostgreSQL with polling as the fallback, polling on SQLite; heartbeats refreshed
every few seconds; periodic reconciliation.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from berth.service.replica import Replica

log = logging.getLogger("berth.service")


def _event_id(payload: str, me: str = "") -> int:
    """The event id a notification announces (payload `id:replica`, or just `id`); -1 for this
    replica's own commits, which the committing request applies itself."""
    head, sep, who = payload.partition(":")
    if sep and who == me:
        return -1
    try:
        return int(head)
    except ValueError:
        return 1 << 62  # unknown payload: sync


class SyncThread:
    """Keeps a replica's tables current until stopped."""

    def __init__(self, replica: Replica, *, simulate_heartbeats: bool = False) -> None:
        self.replica = replica
        self.simulate = simulate_heartbeats
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="berth-sync", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def _listener(self) -> Any:
        if self.replica.store.sqlite:
            return None
        try:
            import psycopg

            url = self.replica.store.engine.url.set(drivername="postgresql")
            conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
            conn.execute("LISTEN berth_events")
            return conn
        except Exception as exc:  # fall back to polling
            log.warning("LISTEN unavailable, polling instead: %s", exc)
            return None

    def run(self) -> None:
        r = self.replica
        cfg = r.config
        listener = self._listener()
        next_beat = next_reconcile = next_simulate = next_poll = 0.0
        me = cfg.replica_id
        while not self.stop.is_set():
            try:
                if listener is not None:
                    # newest id announced by another replica (-1: none); own commits are
                    # applied by their requests, so they wake nothing here
                    newest, woke = -1, False
                    for note in listener.notifies(timeout=cfg.poll_interval, stop_after=1):
                        newest, woke = max(newest, _event_id(note.payload, me)), True
                    # drain whatever else arrived meanwhile (one sync for a burst)
                    for note in listener.notifies(timeout=0.0):
                        newest = max(newest, _event_id(note.payload, me))
                    now = time.monotonic()
                    if (
                        not woke
                        or now >= next_poll
                        or newest > r.last_event
                        or (newest >= 0 and r.has_gaps())
                    ):
                        r.sync()
                        next_poll = now + cfg.poll_interval
                else:
                    self.stop.wait(cfg.poll_interval)
                    r.sync()
                now = time.monotonic()
                if self.simulate and now >= next_simulate:
                    r.store.touch_heartbeats(r.clock(), cfg.service_down_time)
                    next_simulate = now + cfg.service_down_time / 4
                if now >= next_beat:
                    r.refresh_heartbeats()
                    next_beat = now + cfg.heartbeat_interval
                if now >= next_reconcile:
                    if next_reconcile:
                        r.store.reconcile()
                    next_reconcile = now + cfg.reconcile_interval
            except Exception as exc:  # the database may be briefly away: keep trying
                log.warning("sync failed: %s", exc)
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                    listener = None
                self.stop.wait(1.0)
                if listener is None:
                    listener = self._listener()
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()
