"""Drive Nova 34's own scheduler code over fleets given as JSON (the differential test, tests/nova/).

Runs inside the venv of scripts/ensure-nova-venv.sh, never imports Berth. Reads one JSON object
per line on stdin, `{"cases": [case, ...]}`, and answers one line `{"results": [...]}`. A case
is a fleet in Nova's terms and one request; its result holds, for each instance of the request,
the hosts that pass Nova's filters, every passing host's weight, and the chosen host (or a
NoValidHost). The scheduling loop follows `SchedulerManager._schedule`: for each instance,
`_get_sorted_hosts` (the real filter and weigher handlers, host_subset_size 1), a claim on the
first sorted host whose Placement capacity holds it, then `_consume_selected_host`.

Placement is stood in for by its inventory arithmetic only (`PlacementStandIn`): per host
VCPU, PCPU, MEMORY_MB and DISK_GB inventories with Nova's libvirt driver's reserved amounts,
allocation ratios and max_unit (the total), the flavor's resources as Nova asks for them
(`ResourceRequest.from_request_spec`), and required / forbidden traits.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
import uuid
from typing import Any

from nova import conf, objects
from nova.objects import fields
from nova.pci import stats as pci_stats
from nova.scheduler import filters, host_manager, utils, weights
from nova.scheduler.manager import SchedulerManager
from nova.virt import hardware

CONF = conf.CONF
FILTERS = [
    "AggregateInstanceExtraSpecsFilter",
    "ComputeCapabilitiesFilter",
    "NUMATopologyFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "SameHostFilter",
    "DifferentHostFilter",
]
CELL = "00000000-0000-0000-0000-000000000001"


def setup() -> tuple[SchedulerManager, host_manager.HostManager]:
    objects.register_all()
    CONF([], project="nova", default_config_files=[])
    CONF.set_override("enabled_filters", FILTERS, group="filter_scheduler")
    hm = host_manager.HostManager.__new__(host_manager.HostManager)
    hm.filter_handler = filters.HostFilterHandler()
    classes = hm.filter_handler.get_matching_classes(CONF.filter_scheduler.available_filters)
    hm.filter_cls_map = {cls.__name__: cls for cls in classes}
    hm.filter_obj_map = {}
    hm.enabled_filters = hm._choose_host_filters(FILTERS)
    hm.weight_handler = weights.HostWeightHandler()
    weigher_classes = hm.weight_handler.get_matching_classes(CONF.filter_scheduler.weight_classes)
    hm.weighers = [cls() for cls in weigher_classes]
    manager = SchedulerManager.__new__(SchedulerManager)
    manager.host_manager = hm
    return manager, hm


def _uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def numa_topology(h: dict[str, Any]) -> objects.NUMATopology:
    cells = []
    base = 0
    for c, (shared, dedicated, memory) in enumerate(zip(h["shared"], h["dedicated"], h["memory"])):
        cpuset = set(range(base, base + shared))
        pcpuset = set(range(base + shared, base + shared + dedicated))
        base += shared + dedicated
        cpu_usage = mem_usage = pinned = 0
        for inst in h["instances"]:
            for cell, vcpus, mem in inst["cells"]:
                if cell == c:
                    mem_usage += mem
                    if inst["dedicated"]:
                        pinned += vcpus
                    else:
                        cpu_usage += vcpus
        cells.append(
            objects.NUMACell(
                id=c,
                socket=c,
                cpuset=cpuset,
                pcpuset=pcpuset,
                memory=memory,
                cpu_usage=cpu_usage,
                memory_usage=mem_usage,
                # 4 KiB pages only, as libvirt reports a host without huge pages
                mempages=[
                    objects.NUMAPagesTopology(
                        size_kb=4, total=memory * 256, used=mem_usage * 256, reserved=0
                    )
                ],
                pinned_cpus=set(sorted(pcpuset)[:pinned]),
                siblings=[{cpu} for cpu in sorted(cpuset | pcpuset)],  # no SMT
                network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False),
            )
        )
    return objects.NUMATopology(cells=cells)


def host_state(h: dict[str, Any]) -> host_manager.HostState:
    """A HostState holding what `_update_from_compute_node` copies from the ComputeNode that
    Nova's resource tracker would report for this host (reserved amounts counted as used)."""
    hs = host_manager.HostState(h["name"], h["name"], CELL)
    insts = h["instances"]
    memory, disk = sum(h["memory"]), h["disk_gb"]
    used_disk = h["reserved_gb"] + sum(i["root_gb"] + i["ephemeral_gb"] for i in insts)
    hs.uuid = _uuid(h["name"])
    hs.total_usable_ram_mb = memory
    hs.free_ram_mb = memory - h["reserved_mb"] - sum(i["memory_mb"] for i in insts)
    hs.total_usable_disk_gb = disk
    hs.disk_mb_used = used_disk * 1024
    hs.free_disk_mb = (disk - used_disk) * 1024
    hs.vcpus_total = sum(h["shared"])
    hs.vcpus_used = sum(i["vcpus"] for i in insts)
    hs.numa_topology = numa_topology(h)
    hs.pci_stats = pci_stats.PciDeviceStats(hs.numa_topology)
    hs.hypervisor_type, hs.hypervisor_version = "QEMU", 8002000
    hs.hypervisor_hostname = h["name"]
    hs.supported_instances = []
    hs.stats = {**h["capabilities"], "num_instances": str(len(insts)), "io_workload": str(h["io_ops"])}
    hs.num_instances = len(insts)
    hs.num_io_ops = h["io_ops"]
    hs.metrics = objects.MonitorMetricList(objects=[])
    hs.cpu_allocation_ratio = h["cpu_ratio"]
    hs.ram_allocation_ratio = h["ram_ratio"]
    hs.disk_allocation_ratio = h["disk_ratio"]
    hs.aggregates = [
        objects.Aggregate(id=k, name=a["name"], hosts=[h["name"]], metadata=a["metadata"])
        for k, a in enumerate(h["aggregates"])
    ]
    hs.instances = {i["id"]: objects.Instance(uuid=i["id"]) for i in insts}
    return hs


class PlacementStandIn:
    """Allocation candidates and claims by Placement's capacity arithmetic."""

    def __init__(self, hosts: list[dict[str, Any]]) -> None:
        self.inv: dict[str, dict[str, tuple[int, int, float]]] = {}
        self.used: dict[str, dict[str, int]] = {}
        self.traits = {h["name"]: set(h["traits"]) for h in hosts}
        for h in hosts:
            inv = {
                "VCPU": (sum(h["shared"]), 0, h["cpu_ratio"]),
                "PCPU": (sum(h["dedicated"]), 0, 1.0),
                "MEMORY_MB": (sum(h["memory"]), h["reserved_mb"], h["ram_ratio"]),
                "DISK_GB": (h["disk_gb"], h["reserved_gb"], h["disk_ratio"]),
            }
            self.inv[h["name"]] = {rc: v for rc, v in inv.items() if v[0] > 0}
            used = {rc: 0 for rc in inv}
            for i in h["instances"]:
                used["PCPU" if i["dedicated"] else "VCPU"] += i["vcpus"]
                used["MEMORY_MB"] += i["memory_mb"]
                used["DISK_GB"] += i["disk_gb"]
            self.used[h["name"]] = used

    def fits(self, host: str, resources: dict[str, int]) -> bool:
        for rc, amount in resources.items():
            if rc not in self.inv[host]:
                return False
            total, reserved, ratio = self.inv[host][rc]
            if amount > total or self.used[host][rc] + amount > (total - reserved) * ratio:
                return False
        return True

    def candidates(self, resources: dict[str, int], required: set[str], forbidden: set[str]) -> list[str]:
        return [
            h
            for h in self.inv
            if self.fits(h, resources) and required <= self.traits[h] and not forbidden & self.traits[h]
        ]

    def claim(self, host: str, resources: dict[str, int]) -> bool:
        if not self.fits(host, resources):
            return False
        for rc, amount in resources.items():
            self.used[host][rc] += amount
        return True


def request_spec(req: dict[str, Any]) -> objects.RequestSpec:
    f = req["flavor"]
    flavor = objects.Flavor(
        id=1,
        flavorid=f["name"],
        name=f["name"],
        vcpus=f["vcpus"],
        memory_mb=f["memory_mb"],
        root_gb=f["root_gb"],
        ephemeral_gb=f["ephemeral_gb"],
        swap=f["swap_mb"],
        extra_specs=dict(f["extra_specs"]),
        rxtx_factor=1.0,
        vcpu_weight=0,
        disabled=False,
        is_public=True,
        description=None,
    )
    image = objects.ImageMeta.from_dict({"properties": {}})
    group = None
    g = req.get("group")
    if g is not None:
        group = objects.InstanceGroup(
            uuid=_uuid("group-" + g["id"]),
            name=g["id"],
            policy=g["policy"],
            policies=[g["policy"]],
            rules={"max_server_per_host": g["max_server_per_host"]}
            if g["policy"] == "anti-affinity"
            else {},
            members=list(g["members"]),
            hosts=list(g["hosts"]),
        )
    hints = {}
    for hint in ("same_host", "different_host"):
        if req.get(hint):
            hints[hint] = list(req[hint])
    return objects.RequestSpec(
        flavor=flavor,
        image=image,
        numa_topology=hardware.numa_get_constraints(flavor, image),
        pci_requests=objects.InstancePCIRequests(requests=[]),
        num_instances=len(req["instance_ids"]),
        instance_group=group,
        scheduler_hints=hints,
        project_id="p",
        user_id="u",
        instance_uuid=req["instance_ids"][0],
        ignore_hosts=None,
        force_hosts=None,
        force_nodes=None,
        retry=None,
        availability_zone=None,
        is_bfv=False,
        requested_resources=[],
        request_level_params=objects.RequestLevelParams(),
        requested_destination=None,
    )


def decide(manager: SchedulerManager, hm: host_manager.HostManager, case: dict[str, Any]) -> dict[str, Any]:
    hosts = case["hosts"]
    placement = PlacementStandIn(hosts)
    spec = request_spec(case["request"])
    rr = utils.ResourceRequest.from_request_spec(spec)
    resources = dict(rr.merged_resources())
    required = set(rr.all_required_traits)
    forbidden: set[str] = set()
    for group in rr._rg_by_id.values():  # no public accessor for forbidden traits
        forbidden |= set(group.forbidden_traits)
    names = placement.candidates(resources, required, forbidden)
    states = [host_state(h) for h in hosts if h["name"] in names]
    for hs in states:  # one allocation request per host, as Placement returns for one group
        hs.allocation_candidates = [
            {"allocations": {hs.uuid: {"resources": dict(resources)}}, "mappings": {"": [hs.uuid]}}
        ]
    rejected = {h["name"]: "placement" for h in hosts if h["name"] not in names}
    for hs in states if case.get("explain", True) else []:
        # the first filter that rejects each candidate, for the first instance
        for flt in hm.enabled_filters:
            if not flt.host_passes(hs, spec):
                rejected[hs.host] = type(flt).__name__
                break
    steps = []
    started = time.perf_counter()  # Nova's own work: filters, weighers, claims, consumption
    candidates: list[host_manager.HostState] = states
    for num, iid in enumerate(case["request"]["instance_ids"]):
        # `_get_sorted_hosts`: each instance filters the hosts sorted for the one before
        spec.instance_uuid = iid
        passed = hm.get_filtered_hosts(candidates, spec, num)
        weighed = hm.get_weighed_hosts(passed, spec) if passed else []
        step: dict[str, Any] = {
            "passed": sorted(h.host for h in passed),
            "weights": {w.obj.host: w.weight for w in weighed},
            "chosen": None,
        }
        steps.append(step)
        candidates = [w.obj for w in weighed]
        for hs in candidates:  # host_subset_size 1: claim on the first that Placement holds
            if hs.allocation_candidates and placement.claim(hs.host, resources):
                step["chosen"] = hs.host
                manager._consume_selected_host(hs, spec, instance_uuid=iid)
                break
        if step["chosen"] is None:
            break
    seconds = time.perf_counter() - started
    return {"steps": steps, "rejected": rejected, "seconds": seconds}


def main() -> None:
    warnings.simplefilter("ignore")
    manager, hm = setup()
    print(json.dumps({"ready": True, "nova": _version()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        batch = json.loads(line)
        out = []
        for case in batch["cases"]:
            try:
                out.append(decide(manager, hm, case))
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
                out.append({"error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps({"results": out}), flush=True)


def _version() -> str:
    from importlib.metadata import version

    return version("nova")


if __name__ == "__main__":
    main()
