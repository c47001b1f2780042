"""The elastic control loop built from its configuration file (`settings.ElasticSettings`):
the queue watchers, the clouds' drivers and the timings (`berth serve --elastic FILE`).

The watchers follow the store: each cycle a watcher asks about the groups of its batch system
as they are now (a group added through the API is watched from the next cycle). A group whose
queue selector that batch system cannot use is skipped, with a log line, instead of failing the
cycle. The clouds are clusters the replica drives (`berth.service.clouds`): a cluster
registered with `berth cluster add`, or a simulated cloud the file describes, joined at the
first start (its fleet imported into Berth's topology).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from berth.cloud.driver import CloudDriver
from berth.elastic.model import BatchSystem, QueueSelector, QueueSnapshot
from berth.fleet.io import FleetFileError, load_fleet
from berth.service.clouds.errors import CloudUnavailableError
from berth.service.clouds.service import CloudService
from berth.service.elastic.loop import ElasticLoop, LoopConfig, Watcher
from berth.service.elastic.metrics import ElasticMetrics
from berth.service.elastic.settings import (
    CloudSettings,
    ElasticConfigError,
    ElasticSettings,
    HTCondorWatcherSettings,
    SlurmWatcherSettings,
)
from berth.service.placing.errors import BadRequestError
from berth.service.replica import Replica
from berth.store.errors import StoreError
from berth.store.repo import Store

log = logging.getLogger("berth.elastic")


class GroupWatcher:
    """A batch system's watcher over the store's groups of that system, re-read each cycle."""

    def __init__(
        self,
        store: Store,
        system: BatchSystem,
        make: Callable[[Mapping[str, QueueSelector]], Watcher],
    ) -> None:
        self.store = store
        self.system = system
        self.make = make

    def groups(self) -> dict[str, QueueSelector]:
        out = {}
        for g in self.store.list_elastic_groups():
            q = g.spec.queue
            if q.system is not self.system:
                continue
            usable = q.accounting_group if self.system is BatchSystem.HTCONDOR else None
            if self.system is BatchSystem.SLURM:
                usable = q.partition or q.account
            if not usable:
                log.warning("group %s: its %s queue selector selects nothing", g.name, q.system)
                continue
            out[g.name] = q
        return out

    def snapshot(self) -> QueueSnapshot:
        return self.make(self.groups()).snapshot()


def watchers(settings: ElasticSettings, store: Store) -> list[GroupWatcher]:
    out = []
    for w in settings.watchers:
        if isinstance(w, HTCondorWatcherSettings):
            out.append(GroupWatcher(store, BatchSystem.HTCONDOR, _htcondor(w)))
        else:
            out.append(GroupWatcher(store, BatchSystem.SLURM, _slurm(w)))
    return out


def _htcondor(w: HTCondorWatcherSettings) -> Callable[[Mapping[str, QueueSelector]], Watcher]:
    def make(groups: Mapping[str, QueueSelector]) -> Watcher:
        from berth.elastic.watchers.htcondor import HTCondorWatcher  # the bindings, when used

        return HTCondorWatcher(w.collector, groups, stale_after=w.stale_after)

    return make


def _slurm(w: SlurmWatcherSettings) -> Callable[[Mapping[str, QueueSelector]], Watcher]:
    def make(groups: Mapping[str, QueueSelector]) -> Watcher:
        from berth.elastic.watchers.slurm import SlurmWatcher

        return SlurmWatcher(groups, w.env)

    return make


def drivers(settings: ElasticSettings, clouds: CloudService) -> dict[str, CloudDriver]:
    """The driver of every cloud the file names; a simulated one is joined when missing."""
    out = {}
    for i, c in enumerate(settings.clouds):
        if c.simulated is not None and clouds.cloud_of(c.cluster) is None:
            try:
                _join_simulated(clouds, c, i)
            except (BadRequestError, StoreError, CloudUnavailableError) as exc:
                raise ElasticConfigError(f"clouds[{i}]: cannot join {c.cluster!r}: {exc}") from None
        driver = clouds.registry.get(c.cluster)
        if driver is None:
            raise ElasticConfigError(
                f"clouds[{i}].cluster: {c.cluster!r} is not a cluster this replica drives "
                "(register it with `berth cluster add`, or describe a simulated one)"
            )
        out[c.cluster] = driver
    return out


def _join_simulated(clouds: CloudService, c: CloudSettings, i: int) -> None:
    assert c.simulated is not None
    sim = c.simulated
    try:
        fleet = load_fleet(sim.fleet)
    except FleetFileError as exc:
        raise ElasticConfigError(f"clouds[{i}].simulated.fleet: {exc}") from None
    store = clouds.store
    if sim.region not in {r["name"] for r in store.list_regions()}:
        store.add_region(sim.region)
    config = {
        "cloud": c.cluster,
        "fleet": fleet.model_dump(mode="json", exclude_defaults=True),
        "boot_seconds": sim.boot_seconds,
    }
    clouds.join(c.cluster, sim.region, "simulated", config)


def build_loop(
    settings: ElasticSettings,
    replica: Replica,
    metrics: ElasticMetrics,
    clouds: CloudService,
    agent_url: str,
    *,
    clock: Callable[[], float] = time.time,
) -> ElasticLoop:
    config = LoopConfig(
        controller=settings.controller.build(),
        interval=settings.cycle_seconds,
        agent_url=settings.agent_url or agent_url,
        project=settings.project,
        shutdown_grace=settings.shutdown_grace,
        drain_settle=settings.drain_settle,
        tidal=None if settings.tidal is None else settings.tidal.build(),
    )
    return ElasticLoop(
        replica,
        drivers(settings, clouds),
        watchers(settings, replica.store),
        config,
        metrics=metrics,
        clock=clock,
        executor=clouds.executor,
    )
