"""A replica subscribes to change notifications (LISTEN) again after PostgreSQL comes back.

PostgreSQL is stopped for 5 s and started again: the sync thread must LISTEN again (and say so
in its log and metrics) rather than poll from then on. The replica polls only every 30 s here, so
catching up with another replica's commit within seconds can only be the notification's doing.
Runs on a private cluster (tests/store/pgcluster.py), never the shared server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from berth.service.placing.plain import PlaceArgs, place
from berth.service.replica import Replica
from berth.service.sync import SyncThread
from tests.service.test_sync import replicas
from tests.store.pgcluster import PgCluster, private_cluster

pytestmark = pytest.mark.slow

OUTAGE = 5.0
POLL = 30.0


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PgCluster]:
    with private_cluster() as cluster:
        yield cluster


def _until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _place_retrying(a: Replica) -> None:
    """One placement by replica `a`; its pool's first connections died with the server."""
    for _ in range(5):
        try:
            place(a, PlaceArgs(flavor="p4", count=1, project="default"))
            return
        except Exception:
            time.sleep(0.2)
    place(a, PlaceArgs(flavor="p4", count=1, project="default"))


def test_listen_is_reestablished_after_postgres_restarts(
    private_pg: PgCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="berth.service")
    a, b = replicas(private_pg.url, poll=POLL)
    registry = CollectorRegistry()
    thread = SyncThread(b, registry=registry)
    thread.start()
    try:
        assert _until(lambda: thread.listening, 10)
        private_pg.stop()
        assert _until(lambda: not thread.listening, 10)
        time.sleep(OUTAGE)
        private_pg.start()
        # back within a couple of LISTEN retries of the server accepting connections
        assert _until(lambda: thread.listening, 10), "LISTEN was not re-established"
        _place_retrying(a)
        started, target = time.monotonic(), a.store.latest_event_id()
        assert _until(lambda: b.last_event >= target, 5), (
            "the commit did not reach the replica through NOTIFY"
        )
        assert time.monotonic() - started < 5 < POLL
        assert thread.listen_restored == 1
        labels = {"replica": b.config.replica_id}
        assert registry.get_sample_value("berth_sync_listening", labels) == 1
        assert registry.get_sample_value("berth_listen_restored_total", labels) == 1
        assert any("LISTEN re-established" in r.getMessage() for r in caplog.records)
    finally:
        thread.close()
        for r in (a, b):
            r.store.close()
