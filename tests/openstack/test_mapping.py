"""The pure mapping of Nova's notifications and listings, on answers recorded from Nova 34."""

from __future__ import annotations

import json
from pathlib import Path

from berth.cloud.driver import HostChanged, ServerChanged, ServerGone, ServerState
from berth.cloud.openstack.fleet import FleetParts, NovaHost, Provider, build_fleet, flavor_of
from berth.cloud.openstack.servers import change_of_notification, server_from_api, state_of

RECORDED = json.loads((Path(__file__).parent / "recorded" / "notifications.json").read_text())


def test_a_recorded_boot_migration_disable_and_delete_map_to_changes():
    changes = [change_of_notification(m, "c2.") for m in RECORDED]
    kept = [c for c in changes if c is not None]
    servers = [c.server for c in kept if isinstance(c, ServerChanged)]
    # the last server change says where it now is: the migration's destination, active
    assert servers[-1].state is ServerState.DELETED
    hosts = [s.host for s in servers if s.state is ServerState.ACTIVE]
    assert hosts[0] == "c2.compute1"
    assert hosts[-1] == "c2.compute2"
    # the source's late live_migration_post.end (still naming compute1) is not a change: after
    # the first change on compute2, none names compute1 again
    first_dest = next(i for i, s in enumerate(servers) if s.host == "c2.compute2")
    assert all(s.host == "c2.compute2" for s in servers[first_dest:])
    assert [c.enabled for c in kept if isinstance(c, HostChanged)] == [False, True]
    assert isinstance(kept[-1], ServerGone)
    assert kept[-1].name == "cap1"
    assert servers[0].metadata["berth_instance"] == "cap1"


def test_capacity_is_placements_and_foreign_allocations_are_pinned():
    inv = {
        "VCPU": {"total": 32, "reserved": 2, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 8192, "reserved": 512, "allocation_ratio": 1.5},
        "DISK_GB": {"total": 100, "reserved": 10, "allocation_ratio": 1.0},
        "CUSTOM_GPU": {"total": 2, "reserved": 0, "allocation_ratio": 1.0},
    }
    rp = Provider(
        uuid="u1",
        name="n1",
        root="u1",
        inventories=inv,
        traits=["CUSTOM_X"],
        allocations={"migration-1": {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 5}},
    )
    fleet = build_fleet(FleetParts(prefix="c.", providers=[rp], nova_hosts=[NovaHost("h1", "u1")]))
    (host,) = fleet.hosts
    assert host.name == "c.h1"
    assert host.numa_cells[0].shared_cpus == 30
    assert host.cpu_allocation_ratio == 4.0
    assert host.numa_cells[0].memory_mb == 7680
    assert host.ram_allocation_ratio == 1.5
    assert host.disk.hdd_gb == 90
    assert host.numa_cells[0].pci == {"CUSTOM_GPU": 2}
    (pinned,) = fleet.instances
    assert pinned.id == "allocation:migration-1"
    assert not pinned.migratable


def test_flavor_resources_become_a_pci_alias_and_states_map():
    flavor, aliases = flavor_of(
        {
            "name": "g",
            "vcpus": 2,
            "ram": 1024,
            "disk": 5,
            "swap": "",
            "extra_specs": {"resources:CUSTOM_GPU": "1", "hw:cpu_policy": "shared"},
        }
    )
    assert aliases == ["CUSTOM_GPU"]
    assert flavor.extra_specs == {
        "hw:cpu_policy": "shared",
        "pci_passthrough:alias": "CUSTOM_GPU:1",
    }
    assert state_of("ACTIVE", "migrating") is ServerState.MIGRATING
    assert state_of("SHELVED_OFFLOADED") is ServerState.SHUTOFF
    body = {
        "id": "s1",
        "name": "x",
        "status": "ERROR",
        "OS-EXT-SRV-ATTR:host": None,
        "flavor": {"original_name": "m1"},
        "fault": {"message": "No valid host was found."},
    }
    server = server_from_api(body, "c.")
    assert server.host is None
    assert server.fault == "No valid host was found."
