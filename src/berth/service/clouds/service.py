"""`CloudService`: the clusters this replica drives, put together (one per replica).

It owns the driver registry, the booter, defrag execution, the repairs and one change feed per
joined cluster (a `FeedThread` each when running in the background); routes reach it as
`app.state.clouds`. Tests built with `background=False` drive feeds by hand (`poll`,
`reconcile`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from berth.cloud.driver import CloudDriver, CloudError, CloudErrorKind
from berth.service.clouds import join as joining
from berth.service.clouds.booting import Booter, BootTarget
from berth.service.clouds.defrag_exec import DefragExecutor
from berth.service.clouds.errors import CloudUnavailableError
from berth.service.clouds.reconcile import Repair, Repairs
from berth.service.clouds.registry import CloudRegistry, DriverFactory, make_driver
from berth.service.clouds.sync import ChangeFeed, FeedThread
from berth.service.defrag import DefragService
from berth.service.replica import Replica
from berth.store.errors import NotFoundError
from berth.store.repo import CloudClusterRow, ServerRecord

log = logging.getLogger("berth.service.clouds")

EVICT_TIMEOUT = 60.0
"""Seconds a preemption waits for the cloud to delete the evicted servers before booting."""
EVICT_POLL = 0.25


class CloudService:
    def __init__(
        self,
        replica: Replica,
        defrag: DefragService,
        factory: DriverFactory = make_driver,
        *,
        background: bool = True,
    ) -> None:
        self.replica = replica
        self.store = replica.store
        cfg = replica.config
        self.registry = CloudRegistry(factory)
        self.booter = Booter(replica, self.registry)
        self.executor = DefragExecutor(defrag)
        self.repair = Repair(
            replica, self.booter, self.executor, cfg.cloud_boot_grace, cfg.cloud_build_timeout
        )
        self.background = background
        self.running = False
        self.feeds: dict[str, ChangeFeed] = {}
        self._threads: dict[str, FeedThread] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Open the driver and the feed of every joined cluster (a driver that cannot be made
        now is tried again at `run`)."""
        for row in self.store.list_clouds(states=("joined",)):
            try:
                driver = self.registry.open(row.name, row.kind, row.config)
            except Exception as exc:
                log.warning("cluster %s: no driver: %s", row.name, exc)
                continue
            self._follow(row, driver)

    def run(self) -> None:
        """Follow every feed in the background (one thread per cluster)."""
        with self._lock:
            self.running = True
            feeds = [f for name, f in self.feeds.items() if name not in self._threads]
        for feed in feeds:
            self._thread(feed)

    def _thread(self, feed: ChangeFeed) -> None:
        cfg = self.replica.config
        thread = FeedThread(feed, cfg.cloud_poll_interval, cfg.cloud_reconcile_interval)
        with self._lock:
            self._threads[feed.cluster] = thread
        thread.start()

    def close(self) -> None:
        with self._lock:
            threads = list(self._threads.values())
            self._threads.clear()
        for t in threads:
            t.close()
        self.running = False

    def _follow(self, row: CloudClusterRow, driver: CloudDriver) -> None:
        feed = ChangeFeed(row.name, driver, self.replica, self.repair, self.executor, row.cursor)
        with self._lock:
            self.feeds[row.name] = feed
            running = self.running
        if running:
            self._thread(feed)

    # ------------------------------------------------------------------ joining, leaving
    def join(self, name: str, region: str, kind: str, config: Mapping[str, Any]) -> CloudClusterRow:
        row, driver = joining.join(self.store, self.registry, name, region, kind, config)
        self.registry.add(name, driver)
        self.replica.sync()
        self._follow(row, driver)
        return row

    def leave(self, name: str) -> CloudClusterRow:
        self.store.get_cloud(name)  # 404 before anything changes
        with self._lock:
            thread = self._threads.pop(name, None)
            self.feeds.pop(name, None)
        if thread is not None:
            thread.close()
        row = joining.leave(self.store, self.registry, name)
        self.replica.sync()
        return row

    def clusters(self) -> list[CloudClusterRow]:
        return self.store.list_clouds()

    def cloud_of(self, cluster: str) -> CloudClusterRow | None:
        try:
            return self.store.get_cloud(cluster)
        except NotFoundError:
            return None

    # ------------------------------------------------------------------ booting, following
    def drives(self, cluster: str) -> bool:
        return self.registry.get(cluster) is not None

    def boot(self, cluster: str, targets: Sequence[BootTarget]) -> list[ServerRecord]:
        return self.booter.boot_placement(cluster, targets)

    def delete(self, instance_id: str, project: str | None = None) -> None:
        """Delete an instance of a cluster Berth drives: its server first (a server already
        gone is fine), then its claim."""
        row = self.store.get_instance(instance_id)
        if project is not None and row.project != project:
            raise NotFoundError("instance", instance_id)
        record = self.store.find_server(instance_id)
        driver = self.registry.get(row.cluster)
        if driver is not None and record is not None and record.server_id is not None:
            try:
                driver.delete(record.server_id)
            except CloudError as exc:
                if exc.kind is not CloudErrorKind.NOT_FOUND:
                    raise CloudUnavailableError(f"server of {instance_id}: {exc}") from None
            self.store.set_server(instance_id, state="deleted")
        self.replica.release(instance_id, project=project)

    def delete_servers(
        self, cluster: str, instance_ids: Sequence[str], timeout: float = EVICT_TIMEOUT
    ) -> None:
        """Delete the servers of instances whose claims are already released (evicted by a
        preemption), and wait until the cloud has let them go, so that the boots taking their
        room find it (Placement frees a server's allocation when its delete is done)."""
        driver = self.registry.get(cluster)
        if driver is None:
            return
        waiting: set[str] = set()
        for iid in instance_ids:
            record = self.store.find_server(iid)
            if record is None or record.server_id is None or record.state == "deleted":
                continue
            try:
                driver.delete(record.server_id)
                waiting.add(record.server_id)
            except CloudError as exc:
                if exc.kind is not CloudErrorKind.NOT_FOUND:
                    log.warning("evicted %s: its server stays: %s", iid, exc)
            self.store.set_server(iid, state="deleted")
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            try:
                waiting &= {s.id for s in driver.servers()}
            except CloudError as exc:
                log.warning("cluster %s: waiting for evicted servers: %s", cluster, exc)
            if waiting:
                time.sleep(EVICT_POLL)

    def feed(self, cluster: str) -> ChangeFeed:
        feed = self.feeds.get(cluster)
        if feed is None:
            raise NotFoundError("cloud cluster", cluster)
        return feed

    def poll(self, cluster: str, timeout: float = 0.0) -> Repairs:
        return self.feed(cluster).poll(timeout)

    def reconcile(self, cluster: str) -> Repairs:
        return self.feed(cluster).reconcile()
