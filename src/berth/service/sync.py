"""The background thread that keeps a replica's tables current (docs/service.md).

LISTEN/NOTIFY on PostgreSQL with polling as the fallback, polling on SQLite; heartbeats refreshed
every few seconds; periodic reconciliation. When the LISTEN connection is lost (the database
restarted, the network dropped it), the thread polls and tries to LISTEN again every
`LISTEN_RETRY` seconds until it succeeds, and says so in its log and in `berth_sync_listening` /
`berth_listen_restored_total` (docs/service.md, "Real-time sync between replicas").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from berth.service.replica import Replica

log = logging.getLogger("berth.service")

LISTEN_RETRY = 1.0
"""Seconds between attempts to LISTEN again while polling on PostgreSQL."""
LISTEN_CONNECT_TIMEOUT = 3
"""Seconds one attempt to open the LISTEN connection may take (an unreachable host)."""


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

    def __init__(
        self,
        replica: Replica,
        *,
        simulate_heartbeats: bool = False,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.replica = replica
        self.simulate = simulate_heartbeats
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="berth-sync", daemon=True)
        self.listening = False
        """True while the LISTEN connection is up (always False on SQLite)."""
        self.listen_restored = 0
        """How many times LISTEN was established again after it was lost."""
        self._lost_at: float | None = None  # when LISTEN was lost (monotonic), while it is
        self._next_listen = 0.0
        self._next_poll = 0.0
        rid = replica.config.replica_id
        self._gauge = Gauge(
            "berth_sync_listening",
            "1 while the replica is subscribed to change notifications (LISTEN), else 0",
            ["replica"],
            registry=registry,
        ).labels(rid)
        self._restored = Counter(
            "berth_listen_restored",
            "Times the replica subscribed to change notifications again after losing them",
            ["replica"],
            registry=registry,
        ).labels(rid)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def _listen(self) -> Any:
        """Open the LISTEN connection; None (polling, retried in `LISTEN_RETRY`) if it fails."""
        self._next_listen = time.monotonic() + LISTEN_RETRY
        if self.replica.store.sqlite:
            return None
        try:
            import psycopg

            url = self.replica.store.engine.url.set(drivername="postgresql")
            conn = psycopg.connect(
                url.render_as_string(hide_password=False),
                autocommit=True,
                connect_timeout=LISTEN_CONNECT_TIMEOUT,
            )
            conn.execute("LISTEN berth_events")
        except Exception as exc:  # poll meanwhile
            if self._lost_at is None:
                self._lost_at = time.monotonic()
                log.warning(
                    "LISTEN unavailable, polling every %.1f s and retrying every %.0f s: %s",
                    self.replica.config.poll_interval,
                    LISTEN_RETRY,
                    exc,
                )
            return None
        if self._lost_at is not None:
            log.warning(
                "LISTEN re-established after %.1f s; notifications wake this replica again",
                time.monotonic() - self._lost_at,
            )
            self.listen_restored += 1
            self._restored.inc()
            self._lost_at = None
        self._next_poll = 0.0  # sync at once: what was committed while nobody listened
        self.listening = True
        self._gauge.set(1)
        return conn

    def _drop(self, listener: Any) -> None:
        """Close a LISTEN connection that failed (or at shutdown)."""
        if listener is None:
            return
        with contextlib.suppress(Exception):
            listener.close()
        self.listening = False
        self._gauge.set(0)
        if self._lost_at is None and not self.stop.is_set():
            self._lost_at = time.monotonic()
            log.warning("LISTEN connection lost: polling until it is re-established")

    def _wait_notified(self, listener: Any) -> None:
        """Wait up to a poll interval for notifications; sync if another replica wrote (or if
        the interval passed, or gaps are waiting)."""
        r = self.replica
        # newest id announced by another replica (-1: none); own commits are applied by their
        # requests, so they wake nothing here
        newest, woke = -1, False
        for note in listener.notifies(timeout=r.config.poll_interval, stop_after=1):
            newest, woke = max(newest, _event_id(note.payload, r.config.replica_id)), True
        # drain whatever else arrived meanwhile (one sync for a burst)
        for note in listener.notifies(timeout=0.0):
            newest = max(newest, _event_id(note.payload, r.config.replica_id))
        now = time.monotonic()
        if (
            not woke
            or now >= self._next_poll
            or newest > r.last_event
            or (newest >= 0 and r.has_gaps())
        ):
            r.sync()
            self._next_poll = now + r.config.poll_interval

    def _poll(self) -> None:
        """Without LISTEN: sync every poll interval, waking early to try LISTEN again."""
        wake = self._next_poll
        if not self.replica.store.sqlite:
            wake = min(wake, self._next_listen)
        self.stop.wait(max(0.0, wake - time.monotonic()))
        if time.monotonic() >= self._next_poll:
            self.replica.sync()
            self._next_poll = time.monotonic() + self.replica.config.poll_interval

    def run(self) -> None:
        r = self.replica
        cfg = r.config
        listener = self._listen()
        next_beat = next_reconcile = next_simulate = 0.0
        while not self.stop.is_set():
            try:
                if listener is None and time.monotonic() >= self._next_listen:
                    listener = self._listen()
                if listener is not None:
                    self._wait_notified(listener)
                else:
                    self._poll()
                now = time.monotonic()
                if self.simulate and now >= next_simulate:
                    r.store.touch_heartbeats(r.clock(), cfg.service_down_time, cfg.max_clock_skew)
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
                self._drop(listener)  # it may be as dead as the query's connection
                listener = None
                self.stop.wait(1.0)
        self._drop(listener)
