"""One cluster's change feed, applied to Berth's claims, and the thread that follows it.

`ChangeFeed.poll` asks the driver for the changes after the stored cursor
(`CloudDriver.changes`: notifications when the driver has them, its own polling otherwise),
applies each (`reconcile.Repair`: a server changed or gone; a host enabled or disabled; a
`Resync` runs the full reconciliation), stores the new cursor, refreshes the cluster's host
heartbeats (the cloud answered) and lets defrag execution ask for the migrations it owes.
`FeedThread` polls in a loop (blocking in the driver up to `poll_interval`) and reconciles in
full every `reconcile_interval` seconds, and once when it starts (a restarted replica's
recovery of boot intents).
"""

from __future__ import annotations

import logging
import threading
import time

from berth.cloud.driver import (
    CloudDriver,
    CloudError,
    HostChanged,
    Resync,
    ServerChanged,
    ServerGone,
)
from berth.service.clouds.defrag_exec import DefragExecutor
from berth.service.clouds.reconcile import Repair, Repairs
from berth.service.replica import Replica
from berth.store.errors import NotFoundError

log = logging.getLogger("berth.service.clouds")


class ChangeFeed:
    """Applies one cluster's changes (thread-safe: one poll or reconcile at a time)."""

    def __init__(
        self,
        cluster: str,
        driver: CloudDriver,
        replica: Replica,
        repair: Repair,
        defrag: DefragExecutor,
        cursor: str | None,
    ) -> None:
        self.cluster = cluster
        self.driver = driver
        self.replica = replica
        self.store = replica.store
        self.repair = repair
        self.defrag = defrag
        self.cursor = cursor
        self.lock = threading.Lock()
        self.reconciles = 0
        self.changes_seen = 0

    def poll(self, timeout: float = 0.0) -> Repairs:
        """Apply the changes after the cursor (waiting up to `timeout` for the first)."""
        out = Repairs()
        batch = self.driver.changes(self.cursor, timeout)
        with self.lock:
            resync = False
            for change in batch.changes:
                self.changes_seen += 1
                if isinstance(change, ServerChanged):
                    self.repair.server(self.cluster, self.driver, change.server, out)
                elif isinstance(change, ServerGone):
                    self.repair.gone(self.cluster, change.server_id, out)
                elif isinstance(change, HostChanged):
                    self._host(change)
                elif isinstance(change, Resync):
                    log.info("cluster %s: resync (%s)", self.cluster, change.reason)
                    resync = True
            if batch.cursor != self.cursor:
                self.cursor = batch.cursor
                self.store.save_cursor(self.cluster, self.cursor)
            self.store.heartbeat_cluster(self.cluster, self.replica.clock())
            self.replica.refresh_heartbeats()
            self.defrag.tick(self.cluster, self.driver)
        if resync:
            out.merge(self.reconcile())
        return out

    def reconcile(self) -> Repairs:
        """Compare the whole cluster with Berth's claims and repair every difference."""
        with self.lock:
            out = self.repair.reconcile(self.cluster, self.driver)
            self.store.save_cursor(self.cluster, self.cursor, reconciled=True)
            self.reconciles += 1
        if out.count():
            log.info("cluster %s reconciled: %s", self.cluster, out)
        return out

    def _host(self, change: HostChanged) -> None:
        if change.enabled is None:
            return
        try:
            ev = self.store.set_host_enabled(change.host, change.enabled)
        except NotFoundError:
            return
        with self.replica.lock:
            self.replica._apply_own(ev)


class FeedThread:
    """Follows one cluster's feed in the background until closed."""

    def __init__(self, feed: ChangeFeed, poll_interval: float, reconcile_interval: float) -> None:
        self.feed = feed
        self.poll_interval = poll_interval
        self.reconcile_interval = reconcile_interval
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.run, name=f"berth-cloud-{feed.cluster}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def run(self) -> None:
        next_full = 0.0  # reconcile once at start
        while not self.stop.is_set():
            try:
                if time.monotonic() >= next_full:
                    self.feed.reconcile()
                    next_full = time.monotonic() + self.reconcile_interval
                self.feed.poll(self.poll_interval)
            except CloudError as exc:
                log.warning("cluster %s: %s", self.feed.cluster, exc)
                self.stop.wait(min(5.0, max(self.poll_interval, 0.5)))
            except Exception:  # the database may be briefly away: keep following
                log.exception("cluster %s: change feed", self.feed.cluster)
                self.stop.wait(min(5.0, max(self.poll_interval, 0.5)))
