"""The in-process cloud keeps the `CloudDriver` contract: refusals, server life, change feed."""

from __future__ import annotations

import pytest

from berth.cloud.driver import (
    BootRequest,
    CloudDriver,
    CloudError,
    CloudErrorKind,
    HostChanged,
    HostPower,
    Resync,
    ServerChanged,
    ServerGone,
    ServerState,
)
from berth.cloud.simulated import SimulatedCloud
from berth.core.model import Flavor, Fleet, Host, Instance, NumaCell


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fleet() -> Fleet:
    cell = NumaCell(shared_cpus=4, memory_mb=8192)
    return Fleet(
        hosts=[
            Host(name="h1", numa_cells=[cell]),
            Host(name="h2", numa_cells=[cell]),
            Host(name="off", numa_cells=[cell], enabled=False),
        ],
        flavors=[Flavor(name="small", vcpus=2, memory_mb=2048)],
        instances=[Instance(id="old", host="h2", flavor="small")],
    )


def cloud(**kw: object) -> tuple[SimulatedCloud, Clock]:
    clock = Clock()
    return SimulatedCloud("c1", fleet(), clock=clock, **kw), clock  # type: ignore[arg-type]


def test_is_a_cloud_driver() -> None:
    assert isinstance(cloud()[0], CloudDriver)


@pytest.mark.parametrize(
    ("request_", "kind", "why"),
    [
        (BootRequest("a", "huge", "h1"), CloudErrorKind.REFUSED, "no flavor"),
        (BootRequest("a", "small", "nowhere"), CloudErrorKind.NOT_FOUND, "no host"),
        (BootRequest("a", "small", "off"), CloudErrorKind.REFUSED, "disabled"),
        (BootRequest("old", "small", "h1"), CloudErrorKind.REFUSED, "exists"),
    ],
)
def test_boot_refusals_change_nothing(
    request_: BootRequest, kind: CloudErrorKind, why: str
) -> None:
    c, _ = cloud()
    before = (c.servers(), c.changes(None))
    with pytest.raises(CloudError) as err:
        c.boot(request_)
    assert err.value.kind is kind
    assert why in str(err.value)
    assert (c.servers(), c.changes(None)) == before


def test_full_host_refuses_the_third_boot() -> None:
    c, _ = cloud()
    c.boot(BootRequest("a", "small", "h1"))
    c.boot(BootRequest("b", "small", "h1"))
    with pytest.raises(CloudError, match="has 0 vCPUs"):
        c.boot(BootRequest("c", "small", "h1"))


def test_server_life_with_hooks_and_change_feed() -> None:
    booted: list[str] = []
    deleted: list[str] = []
    c, clock = cloud(
        boot_seconds=30.0,
        on_boot=lambda s: booted.append(s.name),
        on_delete=lambda s: deleted.append(s.name),
    )
    start = c.changes(None).cursor
    server = c.boot(BootRequest("vm1", "small", "h1", project="juno"))
    assert server.state is ServerState.BUILDING
    assert booted == []
    clock.now = 29.0
    assert c.servers()[-1].state is ServerState.BUILDING
    clock.now = 30.0
    assert {s.name: s.state for s in c.servers()}["vm1"] is ServerState.ACTIVE
    assert booted == ["vm1"]
    c.live_migrate(server.id, "h2")
    c.delete(server.id)
    assert deleted == ["vm1"]
    feed = c.changes(start)
    kinds = [
        (type(ch).__name__, ch.server.state.value, ch.server.host)
        if isinstance(ch, ServerChanged)
        else (type(ch).__name__,)
        for ch in feed.changes
    ]
    assert kinds == [
        ("ServerChanged", "building", "h1"),
        ("ServerChanged", "active", "h1"),
        ("ServerChanged", "active", "h2"),
        ("ServerGone",),
    ]
    assert isinstance(feed.changes[-1], ServerGone)
    assert c.changes(feed.cursor).changes == []


def test_failed_boot_reports_error_and_runs_no_hook() -> None:
    booted: list[str] = []
    c, _ = cloud(on_boot=lambda s: booted.append(s.name))
    c.fail_boots = 1
    bad = c.boot(BootRequest("a", "small", "h1"))
    good = c.boot(BootRequest("b", "small", "h1"))
    assert (bad.state, good.state) == (ServerState.ERROR, ServerState.ACTIVE)
    assert bad.fault
    assert booted == ["b"]


def test_power_off_only_an_empty_host() -> None:
    c, _ = cloud()
    with pytest.raises(CloudError, match="has servers"):
        c.set_host_power("h2", on=False)
    cursor = c.changes(None).cursor
    c.set_host_power("h1", on=False)
    assert c.power("h1") is HostPower.OFF
    assert c.changes(cursor).changes == [HostChanged("h1", power=HostPower.OFF)]
    assert not {h.name: h.enabled for h in c.inventory().hosts}["h1"]
    with pytest.raises(CloudError, match="powered off"):
        c.boot(BootRequest("a", "small", "h1"))


def test_lost_changes_ask_for_a_resync() -> None:
    c, _ = cloud()
    cursor = c.changes(None).cursor
    c.boot(BootRequest("a", "small", "h1"))
    c.forget_changes()
    batch = c.changes(cursor)
    assert len(batch.changes) == 1
    assert isinstance(batch.changes[0], Resync)
    assert c.changes(batch.cursor).changes == []


def test_inventory_lists_running_servers_as_instances() -> None:
    c, _ = cloud()
    c.boot(BootRequest("a", "small", "h1", project="juno"))
    inv = c.inventory()
    assert {(i.id, i.host, i.project) for i in inv.instances} == {
        ("old", "h2", "default"),
        ("a", "h1", "juno"),
    }
