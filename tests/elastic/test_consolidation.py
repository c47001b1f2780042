"""Tidal consolidation end to end, in-process and in virtual time: the real app (store on SQLite,
replica, defrag service and execution, a cluster joined through the cloud service) over a
`SimulatedCloud`, the elastic loop with its power manager, a scripted queue. The change feed
is polled by hand (`clouds.poll`) where its thread would run; nothing sleeps.

Demand falls -> the hosts cheapest to empty are drained, their instances (adopted servers and
the loop's own VMs) live-migrated off through the defrag machinery -> the emptied hosts power
off -> yesterday's peak comes round again -> they power on ahead of it."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from berth.cloud.driver import (
    BootRequest,
    CloudError,
    CloudErrorKind,
    HostPower,
    ServerChanged,
    ServerState,
)
from berth.cloud.simulated import SimulatedCloud
from berth.core.model import Instance
from berth.elastic.model import GroupDemand, QueueSnapshot, VmState
from berth.elastic.state import ControllerConfig
from berth.elastic.tidal import DAY, TidalConfig
from berth.service.app import create_app
from berth.service.clouds.service import CloudService
from berth.service.config import ServiceConfig
from berth.service.elastic.consolidation import CREATED_BY, EMPTYING
from berth.service.elastic.loop import ElasticLoop, LoopConfig
from berth.service.elastic.settings import ElasticConfigError, parse_elastic_settings
from berth.service.replica import Replica
from berth.store.repo import Store
from tests.service.cloudenv import cloud_fleet
from tests.service.elastic_env import htcondor_group
from tests.store.fleets import NOW

HOSTS = [f"c1-h-{i}" for i in range(4)]  # 24 vCPUs, room for four p4 each
OLD = {"c1-old-0": HOSTS[1], "c1-old-1": HOSTS[1], "c1-old-2": HOSTS[2], "c1-old-3": HOSTS[2]}
OLD["c1-old-4"] = HOSTS[3]  # p4 servers running when the cluster joins (adopted)
TIDAL = TidalConfig(
    days=1, lookahead=3600, margin=0.0, min_on=1, min_dwell=0, max_migrations=8, max_concurrent=1
)
# VMs that never report stay booting (a long boot deadline): they hold their claims and servers
CONTROL = ControllerConfig(boot_deadline=1e9, heartbeat_stale=1e9)
_clouds = itertools.count(1)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Queue:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.idle = 0
        self.clock = clock

    def snapshot(self) -> QueueSnapshot:
        return QueueSnapshot(self.clock(), {"juno": GroupDemand("juno", idle_jobs=self.idle)}, {})


@dataclass
class World:
    store: Store
    replica: Replica
    clouds: CloudService
    cloud: SimulatedCloud
    loop: ElasticLoop
    registry: CollectorRegistry

    def metrics(self, name: str) -> float:
        lines = generate_latest(self.registry).decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def start(db: Path, clock: Clock, queue: Queue, cloud_name: str) -> World:
    """The service and its loop over the database (a second call is a restart)."""
    url = f"sqlite:///{db}"
    store = Store.open(url, replica="r1")
    if "r1" not in {r["name"] for r in store.list_regions()}:
        store.add_region("r1")
    config = ServiceConfig(db_url=url, token_cache_ttl=0.0, service_down_time=1e10)
    app = create_app(config, store=store, clock=clock, background=False)
    clouds: CloudService = app.state.clouds
    if clouds.cloud_of("c1") is None:
        fleet = cloud_fleet("c1", 4)
        fleet = fleet.model_copy(
            update={"instances": [Instance(id=i, host=h, flavor="p4") for i, h in OLD.items()]}
        )
        clouds.join("c1", "r1", "simulated", {"cloud": cloud_name, "fleet": fleet.model_dump()})
    cloud = clouds.registry.get("c1")
    assert isinstance(cloud, SimulatedCloud)
    loop = ElasticLoop(
        app.state.replica,
        {"c1": cloud},
        [queue],
        LoopConfig(controller=CONTROL, agent_url="http://testserver", tidal=TIDAL),
        metrics=app.state.elastic_metrics,
        clock=clock,
        executor=clouds.executor,
    )
    return World(store, app.state.replica, clouds, cloud, loop, app.state.metrics.registry)


def tick(w: World, clock: Clock) -> None:
    """One minute: the change feed's round (it asks the cloud for the migrations the defrag
    driver started, and hears the moves back), then a control cycle."""
    w.clouds.poll("c1")
    w.clouds.poll("c1")
    clock.now += 60
    w.loop.cycle()
    check(w)


def check(w: World) -> None:
    """No over-commit in Berth's table, nothing powered off with a server on it, and every
    server where Berth's claim says (once no migration is in flight)."""
    table = w.replica.clusters["c1"].table
    assert (table.host_free >= 0).all()
    assert (table.cell_free >= 0).all()
    on_host = Counter(s.host for s in w.cloud.servers() if s.state is not ServerState.DELETED)
    for h in HOSTS:
        if w.cloud.power(h) is HostPower.OFF:
            assert on_host[h] == 0, h
            assert int(table.n_instances[table.index[h]]) == 0, h


def migrations(cloud: SimulatedCloud) -> Counter[str]:
    """Live migrations the cloud carried out, per server name (from its change log)."""
    where: dict[str, str | None] = dict(OLD)
    moved: Counter[str] = Counter()
    for c in cloud.changes(None).changes:
        if isinstance(c, ServerChanged):
            s = c.server
            if s.name in where and where[s.name] != s.host:
                moved[s.name] += 1
            where[s.name] = s.host
    return moved


def boots(cloud: SimulatedCloud) -> Counter[str]:
    return Counter(
        c.server.name
        for c in cloud.changes(None).changes
        if isinstance(c, ServerChanged) and c.server.state is ServerState.BUILDING
    )


def tidal_plans(w: World) -> list[str]:
    return [p.id for p in w.clouds.executor.defrag.store.list_plans() if p.created_by == CREATED_BY]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def demand_falls(tmp_path: Path, clock: Clock) -> tuple[World, Queue, str]:
    """Two elastic VMs boot on the first host while the queue is long (the others disabled
    for that cycle: 4 vCPUs used on h-3, 8 on each other host); then the queue empties and a
    plan is made to empty h-3 and h-0 (the cheapest) into the room left on h-1 and h-2."""
    queue = Queue(clock)
    name = f"tidal-consolidation-{next(_clouds)}"
    w = start(tmp_path / "berth.db", clock, queue, name)
    w.store.put_elastic_group(htcondor_group("juno", max_vms=2))
    for h in HOSTS[1:]:
        w.store.set_host_enabled(h, False)
    w.replica.sync()
    queue.idle = 200  # more than the fleet: nothing powers off, nothing is emptied
    w.loop.cycle()
    assert {v.host for v in w.store.list_vms(states=[VmState.BOOTING])} == {HOSTS[0]}
    assert len(w.store.list_vms()) == 2
    assert tidal_plans(w) == []
    for h in HOSTS[1:]:
        w.store.set_host_enabled(h, True)
    w.replica.sync()
    queue.idle = 0  # the demand falls to what runs: seven p4 (28 vCPUs)
    tick(w, clock)
    return w, queue, name


def test_demand_falls_hosts_are_emptied_powered_off_and_on_again_ahead(
    tmp_path: Path, clock: Clock
) -> None:
    w, _queue, _name = demand_falls(tmp_path, clock)
    (plan_id,) = tidal_plans(w)
    plan = w.clouds.executor.defrag.store.get_plan(plan_id)
    drained = list(plan.target["drain"])
    assert sorted(drained) == [HOSTS[0], HOSTS[3]]
    assert plan.state == "running"
    rows = {r.host: r for r in w.store.host_power_states()}
    assert all(rows[h].changed_by == EMPTYING and h in w.replica.draining for h in drained)
    steps = w.clouds.executor.defrag.store.steps(plan_id)
    assert {s.source for s in steps} == set(drained)
    vm_ids = {v.instance_id for v in w.store.list_vms()}
    for _ in range(len(steps) + 3):  # one migration in flight at a time (max_concurrent)
        tick(w, clock)
    assert w.clouds.executor.defrag.store.get_plan(plan_id).state == "done"
    off = sorted(h for h in HOSTS if w.cloud.power(h) is HostPower.OFF)
    assert off == sorted(drained)  # the emptied hosts, and only they, went off
    assert not w.replica.draining
    assert all(not w.store.get_host(h).host.enabled for h in off)
    moved = migrations(w.cloud)
    assert sum(moved.values()) == len(steps)
    assert set(moved.values()) == {1}
    assert vm_ids & {s.instance_id for s in steps}  # the loop's own VMs moved too
    for vm in w.store.list_vms():  # a VM's record follows its server
        server = next(s for s in w.cloud.servers() if s.name == vm.name)
        assert vm.host == server.host
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="done"}') == len(steps)
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="failed"}') == 0
    assert w.metrics('berth_elastic_power_transitions_total{power="off"}') == len(off)
    assert tidal_plans(w) == [plan_id]  # nothing more can be emptied: no second plan

    # yesterday, 20 minutes from now, the demand filled the fleet: power on ahead of it
    w.store.record_demand(clock.now - DAY + 1200, 96.0)
    tick(w, clock)
    assert all(w.cloud.power(h) is HostPower.ON for h in HOSTS)
    assert all(w.store.get_host(h).host.enabled for h in HOSTS)
    assert w.metrics('berth_elastic_power_transitions_total{power="on"}') == len(off)
    assert sum(boots(w.cloud).values()) == 2  # the two VMs, booted once each
    w.store.close()


def test_a_restart_mid_plan_goes_on_with_the_same_plan(tmp_path: Path, clock: Clock) -> None:
    w, queue, name = demand_falls(tmp_path, clock)
    (plan_id,) = tidal_plans(w)
    w.clouds.poll("c1")  # the first migration is asked for; then the process dies
    flying = w.clouds.executor.defrag.store.migrating_steps()
    assert len(flying) == 1
    w.store.close()
    w = start(tmp_path / "berth.db", clock, queue, name)
    for _ in range(8):
        tick(w, clock)
    assert tidal_plans(w) == [plan_id]
    plan = w.clouds.executor.defrag.store.get_plan(plan_id)
    assert plan.state == "done"
    steps = w.clouds.executor.defrag.store.steps(plan_id)
    assert all(s.state == "done" for s in steps)
    moved = migrations(w.cloud)
    assert sum(moved.values()) == len(steps)
    assert set(moved.values()) == {1}
    assert sum(boots(w.cloud).values()) == 2  # and no VM booted again
    assert sorted(h for h in HOSTS if w.cloud.power(h) is HostPower.OFF) == sorted(
        plan.target["drain"]
    )
    w.store.close()


def test_a_host_with_an_outside_server_is_left_alone_every_cycle(
    tmp_path: Path, clock: Clock
) -> None:
    """A server Berth does not hold pins its host: no disable/enable pair each cycle."""
    queue = Queue(clock)
    w = start(tmp_path / "berth.db", clock, queue, f"tidal-outside-{next(_clouds)}")
    for server in w.cloud.servers():  # Berth's own servers go: every host is empty
        w.clouds.delete(server.name)
    w.cloud.boot(BootRequest("outside", "p4", "c1-h-3"))  # behind Berth's back, not polled
    generation = w.store.get_host("c1-h-3").generation
    for _ in range(3):
        clock.now += 60
        w.loop.cycle()
    assert w.cloud.power("c1-h-3") is HostPower.ON
    assert w.store.get_host("c1-h-3").generation == generation  # never disabled nor enabled
    assert all(a.host != "c1-h-3" for a in w.loop.powered)
    assert sum(w.cloud.power(h) is HostPower.OFF for h in HOSTS) == 3  # min_on is the pinned one
    w.store.close()


def test_demand_returning_mid_plan_lets_the_hosts_go_and_loses_nothing(
    tmp_path: Path, clock: Clock
) -> None:
    """The forecast needs the hosts being emptied again: they take placements at once, the plan
    stops starting migrations, the one in flight finishes, and then it is cancelled."""
    w, queue, _name = demand_falls(tmp_path, clock)
    (plan_id,) = tidal_plans(w)
    w.clouds.poll("c1")  # the first migration is asked for
    assert len(w.clouds.executor.defrag.store.migrating_steps()) == 1
    queue.idle = 200
    for _ in range(4):
        tick(w, clock)
    plan = w.clouds.executor.defrag.store.get_plan(plan_id)
    assert plan.state == "cancelled"
    steps = w.clouds.executor.defrag.store.steps(plan_id)
    assert [s.state for s in steps].count("done") == 1  # the one in flight, the rest skipped
    assert not w.replica.draining
    assert all(r.changed_by != EMPTYING for r in w.store.host_power_states())
    assert all(w.cloud.power(h) is HostPower.ON for h in HOSTS)
    assert all(w.store.get_host(h).host.enabled for h in HOSTS)
    table = w.replica.clusters["c1"].table
    claims = {iid: a.host for iid, a in table.allocations.items()}
    vms = {v.name: v.instance_id or "" for v in w.store.list_vms()}
    for s in w.cloud.servers():  # every server where Berth holds it
        assert claims[vms.get(s.name, s.name)] == s.host, s.name
    assert sum(migrations(w.cloud).values()) == 1
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="done"}') == 1
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="failed"}') == 0
    skipped = w.metrics('berth_elastic_consolidation_migrations_total{outcome="skipped"}')
    assert skipped == len(steps) - 1
    w.store.close()


def test_the_consolidation_settings_are_checked_and_default_sanely() -> None:
    base = {"watchers": [{"kind": "slurm"}], "clouds": [{"cluster": "c1"}]}
    built = parse_elastic_settings({**base, "tidal": {}}).tidal
    assert built is not None
    config = built.build()
    assert (config.max_migrations, config.max_concurrent, config.refused_wait) == (8, 2, 1800.0)
    off = parse_elastic_settings({**base, "tidal": {"max_migrations": 0}}).tidal
    assert off is not None
    assert off.build().max_migrations == 0  # power management without consolidation
    for field, value in (("max_concurrent", 0), ("max_migrations", -1), ("refused_wait", -5)):
        with pytest.raises(ElasticConfigError, match=f"tidal.{field}"):
            parse_elastic_settings({**base, "tidal": {field: value}}, "elastic.yaml")


def test_a_migration_the_cloud_refuses_is_replanned_and_the_hosts_still_empty(
    tmp_path: Path, clock: Clock
) -> None:
    """The first step's target is disabled in the cloud for a moment, behind Berth's back: the
    cloud refuses the live migration, defrag execution aborts the step and gives it another
    target, and the plan still empties its hosts; the failed attempt is counted."""
    w, _queue, _name = demand_falls(tmp_path, clock)
    (plan_id,) = tidal_plans(w)
    (first,) = w.clouds.executor.defrag.store.migrating_steps()
    w.cloud.set_host_enabled(first.target, False)
    w.clouds.poll("c1")  # the feed disables it in Berth too; the cloud refuses the migration
    w.cloud.set_host_enabled(first.target, True)  # back before the next control cycle
    for _ in range(8):
        tick(w, clock)
    plan = w.clouds.executor.defrag.store.get_plan(plan_id)
    assert plan.state == "done"
    steps = w.clouds.executor.defrag.store.steps(plan_id)
    assert all(s.state == "done" for s in steps)
    redone = next(s for s in steps if s.step == first.step)
    assert redone.replans == 1
    assert redone.target != first.target
    assert not {s.target for s in steps} & set(plan.target["drain"])
    moved = migrations(w.cloud)
    assert sum(moved.values()) == len(steps)  # the refused one never moved
    assert sorted(h for h in HOSTS if w.cloud.power(h) is HostPower.OFF) == sorted(
        plan.target["drain"]
    )
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="failed"}') == 1
    assert w.metrics('berth_elastic_consolidation_migrations_total{outcome="done"}') == len(steps)
    w.store.close()


class CannotPower(SimulatedCloud):
    """A cloud whose hosts cannot be powered, as many a real one: the simulated cloud but that."""

    def set_host_power(self, host: str, on: bool) -> None:
        raise CloudError(CloudErrorKind.UNSUPPORTED, "this cloud does not power hosts")


def test_a_cloud_that_cannot_power_hosts_is_tried_once_per_host(
    tmp_path: Path, clock: Clock
) -> None:
    queue = Queue(clock)
    w = start(tmp_path / "berth.db", clock, queue, f"tidal-nopower-{next(_clouds)}")
    fleet = cloud_fleet("c1", 4).model_copy(
        update={"instances": [Instance(id=i, host=h, flavor="p4") for i, h in OLD.items()]}
    )
    cloud = CannotPower("c1", fleet, clock=clock)
    loop = ElasticLoop(
        w.replica,
        {"c1": cloud},
        [queue],
        LoopConfig(controller=CONTROL, agent_url="http://testserver", tidal=TIDAL),
        clock=clock,
    )
    before = w.store.get_host(HOSTS[0]).generation  # the one empty host
    loop.cycle()
    assert [(a.host, a.done) for a in loop.powered] == [(HOSTS[0], False)]
    assert w.store.get_host(HOSTS[0]).host.enabled  # disabled for the try, enabled again
    tried = w.store.get_host(HOSTS[0]).generation
    assert tried == before + 2
    for _ in range(3):
        clock.now += 60
        loop.cycle()
        assert loop.powered == []
    assert w.store.get_host(HOSTS[0]).generation == tried  # never tried again
    w.store.close()
