"""The OpenStack driver against real Nova, Placement and RabbitMQ (scripts/ensure-openstack.sh).

Few tests, each doing much, on one stack per session: the import equals Placement's capacity,
boots land on the chosen host with matching allocations, live migration moves a server,
refusals map to the interface's errors, and a delete behind Berth's back shows in the change
feed (one notification; one poll without notifications).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pytest

from berth.cloud.driver import (
    BootRequest,
    CloudError,
    CloudErrorKind,
    HostChanged,
    ServerChanged,
    ServerGone,
    ServerState,
)
from berth.cloud.openstack import OpenStackCloud, from_stack
from berth.cloud.openstack.reading import placement_get
from berth.core.resources import C_PCPU, H_HDD, H_MEM, H_VCPU
from berth.core.table import HostTable

pytestmark = [pytest.mark.openstack, pytest.mark.slow]


def _name(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:8]}"


def _placement_free(cloud: OpenStackCloud) -> dict[str, dict[str, int]]:
    """Per Nova host: Placement's int((total - reserved) * ratio) - used, per class."""
    out = {}
    for rp in placement_get(cloud.conn, "/resource_providers")["resource_providers"]:
        base = f"/resource_providers/{rp['uuid']}"
        inv = placement_get(cloud.conn, f"{base}/inventories")["inventories"]
        used = placement_get(cloud.conn, f"{base}/usages")["usages"]
        out[rp["name"]] = {
            rc: int((i["total"] - i["reserved"]) * i["allocation_ratio"]) - used.get(rc, 0)
            for rc, i in inv.items()
        }
    return out


def _wait_change(cloud: OpenStackCloud, cursor: str | None, match: Any, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = cloud.changes(cursor, timeout=1.0)
        cursor = batch.cursor
        for change in batch.changes:
            if match(change):
                return change, cursor
    raise AssertionError("the change did not arrive")


def test_import_two_clusters_equals_placement(openstack_clusters):
    clouds = [from_stack(c, notifications=False) for c in openstack_clusters]
    try:
        busy = clouds[0]
        server = busy.boot(BootRequest(_name("imp"), "m1.medium", "cluster1.compute2"))
        busy.wait_for(server.id)
        names: set[str] = set()
        for cloud, entry in zip(clouds, openstack_clusters, strict=True):
            fleet = cloud.inventory()
            assert {h.name for h in fleet.hosts} == {f"{entry['name']}.{h}" for h in entry["hosts"]}
            names |= {h.name for h in fleet.hosts}
            table = HostTable.from_fleet(fleet)
            want = _placement_free(cloud)
            for host in fleet.hosts:
                row = table.index[host.name]
                free = want[cloud.local_host(host.name)]
                assert table.host_free[row, H_VCPU] == free["VCPU"], host.name
                assert table.host_free[row, H_MEM] == free["MEMORY_MB"], host.name
                assert table.host_free[row, H_HDD] == free["DISK_GB"], host.name
                assert int(np.sum(table.cell_free[row, :, C_PCPU])) == free.get("PCPU", 0)
            if entry["name"] == "cluster1":
                ids = {i.id for i in fleet.instances}
                assert server.name in ids
                c1 = next(h for h in fleet.hosts if h.name == "cluster1.compute1")
                assert c1.availability_zone == "az-fast"
                assert c1.aggregates == ["fast"]
                assert "CUSTOM_RACK_A" in c1.traits
                assert c1.numa_cells[0].pci == {"CUSTOM_GPU_T4": 2}
                assert {a.name for a in fleet.pci_aliases} == {"CUSTOM_GPU_T4"}
        assert len(names) == 5  # both clusters have a compute1 and a compute2
        busy.delete(server.id)
    finally:
        for cloud in clouds:
            cloud.close()


def test_boot_migrate_and_delete_behind_berths_back(openstack_clusters):
    entry = openstack_clusters[1]
    cloud = from_stack(entry)
    poller = from_stack(entry, notifications=False)
    try:
        assert cloud.wait_listening(10)
        start = cloud.changes(None).cursor
        poll_cursor = poller.changes(None).cursor
        booted = {}
        for host in ("cluster2.compute1", "cluster2.compute2"):
            s = cloud.boot(BootRequest(_name("boot"), "m1.small", host))
            booted[s.id] = host
        for sid, host in booted.items():
            active = cloud.wait_for(sid)
            assert active.host == host
            allocs = placement_get(cloud.conn, f"/allocations/{sid}")["allocations"]
            (rp,) = allocs
            name = placement_get(cloud.conn, f"/resource_providers/{rp}")["name"]
            assert name == cloud.local_host(host)
            assert allocs[rp]["resources"] == {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 10}
        # the notification feed saw them become active on their hosts
        for sid, host in booted.items():
            _wait_change(
                cloud,
                start,
                lambda c, sid=sid, host=host: (
                    isinstance(c, ServerChanged)
                    and c.server.id == sid
                    and c.server.state is ServerState.ACTIVE
                    and c.server.host == host
                ),
            )
        # live migration moves the server, in Nova, in Placement and in the feed
        moving, other = next(iter(booted)), "cluster2.compute2"
        if booted[moving] == other:
            other = "cluster2.compute1"
        cursor = cloud.changes(start).cursor
        cloud.live_migrate(moving, other)
        _change, cursor = _wait_change(
            cloud,
            cursor,
            lambda c: (
                isinstance(c, ServerChanged)
                and c.server.id == moving
                and c.server.host == other
                and c.server.state is ServerState.ACTIVE
            ),
        )
        assert cloud.wait_for(moving).host == other
        # deleted behind Berth's back: one notification, and one poll without notifications
        victim = moving
        cloud.conn.compute.delete_server(victim)  # a plain SDK call, as an operator's
        t0 = time.monotonic()
        _wait_change(cloud, cursor, lambda c: isinstance(c, ServerGone) and c.server_id == victim)
        heard = time.monotonic() - t0
        deadline = time.monotonic() + 20
        seen = False
        while time.monotonic() < deadline and not seen:
            batch = poller.changes(poll_cursor)
            poll_cursor = batch.cursor
            seen = any(isinstance(c, ServerGone) and c.server_id == victim for c in batch.changes)
            time.sleep(0.5)
        assert seen
        assert heard < 15
        for sid in booted:
            if sid != victim:
                cloud.delete(sid)
    finally:
        cloud.close()
        poller.close()


def test_refusals_and_host_disable(openstack_clusters):
    cloud = from_stack(openstack_clusters[1])
    try:
        assert cloud.wait_listening(10)
        with pytest.raises(CloudError) as err:
            cloud.boot(BootRequest(_name("x"), "m1.small", "cluster2.nowhere"))
        assert err.value.kind is CloudErrorKind.REFUSED
        with pytest.raises(CloudError) as err:
            cloud.boot(BootRequest(_name("x"), "m1.small", "cluster1.compute1"))
        assert err.value.kind is CloudErrorKind.NOT_FOUND  # another cluster's host
        with pytest.raises(CloudError) as err:
            cloud.boot(BootRequest(_name("x"), "no-such-flavor", "cluster2.compute1"))
        assert err.value.kind is CloudErrorKind.REFUSED
        # too big for the host: Nova accepts, its scheduler refuses (ERROR, No valid host)
        big = cloud.boot(BootRequest(_name("big"), "m1.huge", "cluster2.compute2"))
        with pytest.raises(CloudError) as err:
            cloud.wait_for(big.id)
        assert err.value.kind is CloudErrorKind.REFUSED
        assert "No valid host" in err.value.message
        cloud.delete(big.id)
        with pytest.raises(CloudError) as err:
            cloud.delete(str(uuid.uuid4()))
        assert err.value.kind is CloudErrorKind.NOT_FOUND
        with pytest.raises(CloudError) as err:
            cloud.set_host_power("cluster2.compute1", on=False)
        assert err.value.kind is CloudErrorKind.UNSUPPORTED
        # a disabled host: the feed says so, the inventory too, and Nova refuses boots there
        cursor = cloud.changes(None).cursor
        cloud.set_host_enabled("cluster2.compute1", False, "berth test")
        try:
            _wait_change(
                cloud,
                cursor,
                lambda c: (
                    isinstance(c, HostChanged)
                    and c.enabled is False
                    and c.host == "cluster2.compute1"
                ),
            )
            fleet = cloud.inventory()
            assert not next(h for h in fleet.hosts if h.name == "cluster2.compute1").enabled
            refused = cloud.boot(BootRequest(_name("dis"), "m1.tiny", "cluster2.compute1"))
            with pytest.raises(CloudError) as err:
                cloud.wait_for(refused.id)
            assert err.value.kind is CloudErrorKind.REFUSED
            cloud.delete(refused.id)
        finally:
            cloud.set_host_enabled("cluster2.compute1", True)
    finally:
        cloud.close()
