"""Prometheus metrics of one replica (its own registry, so several apps can share a process).

* `berth_decision_seconds` — histogram of the core decision (filter, weigh, select) per attempt.
* `berth_placement_seconds` — histogram of a whole placement request (decide + commit + retries).
* `berth_commit_seconds{result}` — histogram of each placement's commit transaction, `committed`
  or `lost` (a generation race or a rejected plan, then decided again).
* `berth_placements_total{outcome,reason}` — placements by outcome and failure reason.
* `berth_placement_conflicts_total` — commits lost to a concurrent writer (then retried).
* `berth_capacity_remaining{flavor,cluster}` — how many more fit, computed at scrape time.
* `berth_event_lag{replica}` — events committed but not yet applied by this replica.
* `berth_last_event_id{replica}`, `berth_reloads_total{replica}`.
* `berth_sync_listening{replica}`, `berth_listen_restored_total{replica}` — whether the replica is
  subscribed to change notifications; registered by `berth.service.sync`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from berth.service.replica import Replica

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class _Live(Collector):
    def __init__(self, replica: Replica, flavors_limit: int = 200) -> None:
        self.replica = replica
        self.flavors_limit = flavors_limit

    def collect(self) -> Iterator[Metric]:
        r = self.replica
        cap = GaugeMetricFamily(
            "berth_capacity_remaining",
            "More instances of the flavor that fit, per cluster (NUMA-exact)",
            labels=["flavor", "cluster"],
        )
        flavors = sorted(r.flavors)[: self.flavors_limit]
        for cluster, counts in r.capacity(flavors, "cluster").items():
            for flavor, n in counts.items():
                cap.add_metric([flavor, cluster], n)
        yield cap
        try:
            latest = r.store.latest_event_id()
        except Exception:  # the database is down: report what we know
            latest = r.last_event
        lag = GaugeMetricFamily(
            "berth_event_lag", "Events committed but not yet applied", labels=["replica"]
        )
        lag.add_metric([r.config.replica_id], max(0, latest - r.last_event))
        yield lag
        last = GaugeMetricFamily(
            "berth_last_event_id", "Id of the last event applied", labels=["replica"]
        )
        last.add_metric([r.config.replica_id], r.last_event)
        yield last
        reloads = GaugeMetricFamily(
            "berth_reloads", "Full reloads of the cache since start", labels=["replica"]
        )
        reloads.add_metric([r.config.replica_id], r.reloads)
        yield reloads


class Metrics:
    def __init__(self, replica: Replica) -> None:
        self.registry = CollectorRegistry()
        self.decision = Histogram(
            "berth_decision_seconds",
            "Core decision time per attempt (filter, weigh, select)",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.placement = Histogram(
            "berth_placement_seconds",
            "Whole placement request: decide, commit, retries",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.placements = Counter(
            "berth_placements",
            "Placement requests by outcome and reason",
            ["outcome", "reason"],
            registry=self.registry,
        )
        self.commit = Histogram(
            "berth_commit_seconds",
            "Placement commit transaction (generation checks, re-verification, writes)",
            ["result"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._committed = self.commit.labels("committed")
        self._lost = self.commit.labels("lost")
        self.conflicts = Counter(
            "berth_placement_conflicts",
            "Placement attempts that lost a generation race and were retried",
            registry=self.registry,
        )
        self.registry.register(_Live(replica))
        replica.on_decision = self.decision.observe
        replica.on_commit = self._observe_commit

    def _observe_commit(self, seconds: float, committed: bool) -> None:
        (self._committed if committed else self._lost).observe(seconds)
