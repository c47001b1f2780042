"""Prometheus metrics of the elastic pools (registered on the replica's registry).

* `berth_elastic_idle_jobs{group}`, `berth_elastic_wanted_vms{group}` — demand per group, as the
  last control cycle saw it.
* `berth_elastic_vms{group,state}` — live VMs by state, read from the store at scrape time.
* `berth_elastic_boot_seconds` — histogram from a VM's request to its worker joining.
* `berth_elastic_failed_boots_total{group}` — VMs reaped for not joining in time, or refused.
* `berth_elastic_idle_vm_hours_total{group}` — hours joined VMs spent running no job.
* `berth_elastic_actions_total{action}` — actions carried out (start, drain, retire, reap).
* `berth_hosts_powered_off` — hosts Berth powered off (tidal management), at scrape time.
* `berth_elastic_power_transitions_total{power}` — hosts tidal management powered on or off.
* `berth_elastic_consolidation_migrations_total{outcome}` — live migrations of tidal
  consolidation by outcome: `done`, `failed` (started, then aborted, or refused and re-planned),
  `skipped` (never started: the plan was cancelled, or no host could take the instance).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from berth.elastic.model import TERMINAL, VmState
from berth.store.repo import Store

BOOT_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
LIVE = tuple(s for s in VmState if s not in TERMINAL)


class _FromStore(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        vms = GaugeMetricFamily("berth_elastic_vms", "Live elastic VMs", labels=["group", "state"])
        counts: dict[tuple[str, str], int] = {}
        for g in self.store.list_elastic_groups():
            for s in LIVE:
                counts[(g.name, s.value)] = 0
        for vm in self.store.list_vms(states=LIVE):
            key = (vm.group, vm.state.value)
            counts[key] = counts.get(key, 0) + 1
        for (group, state), n in sorted(counts.items()):
            vms.add_metric([group, state], n)
        yield vms
        off = GaugeMetricFamily("berth_hosts_powered_off", "Hosts Berth powered off")
        off.add_metric([], sum(1 for p in self.store.host_power_states() if p.power == "off"))
        yield off


class ElasticMetrics:
    def __init__(self, registry: CollectorRegistry, store: Store) -> None:
        registry.register(_FromStore(store))
        self.idle_jobs = Gauge(
            "berth_elastic_idle_jobs", "Idle jobs that need a slot", ["group"], registry=registry
        )
        self.wanted = Gauge(
            "berth_elastic_wanted_vms", "VMs a group asked for", ["group"], registry=registry
        )
        self.boot = Histogram(
            "berth_elastic_boot_seconds",
            "From a VM's request to its worker joining",
            buckets=BOOT_BUCKETS,
            registry=registry,
        )
        self.failed_boots = Counter(
            "berth_elastic_failed_boots", "Failed boots", ["group"], registry=registry
        )
        self.idle_hours = Counter(
            "berth_elastic_idle_vm_hours",
            "Hours joined VMs ran no job",
            ["group"],
            registry=registry,
        )
        self.actions = Counter(
            "berth_elastic_actions", "Actions carried out", ["action"], registry=registry
        )
        self.power = Counter(
            "berth_elastic_power_transitions",
            "Hosts tidal management powered on or off",
            ["power"],
            registry=registry,
        )
        self.consolidation = Counter(
            "berth_elastic_consolidation_migrations",
            "Tidal consolidation's live migrations by outcome (done, failed, skipped)",
            ["outcome"],
            registry=registry,
        )
