"""What the test stack is made of: two clusters, their computes, ports and databases.

Read by stack.py (which runs in the OpenStack venv and writes the configuration files). Ports
start at BERTH_OPENSTACK_PORT_BASE (default 28700), ten per cluster. The computes of both
clusters share host names on purpose: real clusters do, and Berth must keep them apart.
"""

import os
from dataclasses import dataclass, field

PG = "postgresql+psycopg2://postgres@127.0.0.1:5432/"
RABBIT = os.environ.get("BERTH_OPENSTACK_RABBIT", "rabbit://guest:guest@127.0.0.1:5672/")


@dataclass(frozen=True)
class Compute:
    host: str
    vcpus: int
    memory_mb: int
    local_gb: int
    pcpus: int = 0
    reserved_cpus: int = 0
    reserved_memory_mb: int = 512
    reserved_disk_gb: int = 0
    cpu_ratio: float = 4.0
    ram_ratio: float = 1.0
    disk_ratio: float = 1.0
    custom: dict = field(default_factory=dict)
    traits: tuple = ()


@dataclass(frozen=True)
class Cluster:
    name: str
    index: int
    computes: tuple
    aggregates: tuple  # (name, availability zone or None, hosts, metadata)

    @property
    def base(self) -> int:
        return int(os.environ.get("BERTH_OPENSTACK_PORT_BASE", "28700")) + 10 * self.index

    @property
    def ports(self) -> dict:
        b = self.base
        return {"placement": b, "image": b + 1, "compute": b + 2, "network": b + 3}

    def db(self, what: str) -> str:
        return f"berth_openstack_{self.name}_{what}"

    def url(self, what: str) -> str:
        return PG + self.db(what)

    @property
    def vhost(self) -> str:
        return f"berth-{self.name}"

    @property
    def transport_url(self) -> str:
        return RABBIT + self.vhost


CLUSTERS = (
    Cluster(
        "cluster1",
        0,
        (
            Compute(
                "compute1", 32, 131072, 2000, reserved_cpus=2, reserved_memory_mb=4096,
                custom={"CUSTOM_GPU_T4": 2}, traits=("CUSTOM_RACK_A", "CUSTOM_FAST"),
            ),
            Compute("compute2", 16, 65536, 1000, pcpus=4, cpu_ratio=2.0, traits=("CUSTOM_RACK_A",)),
            Compute("compute3", 48, 196608, 4000, reserved_disk_gb=100, ram_ratio=1.5,
                    traits=("CUSTOM_RACK_B",)),
        ),
        (("fast", "az-fast", ("compute1",), {"ssd": "true"}), ("rack-b", None, ("compute3",), {})),
    ),
    Cluster(
        "cluster2",
        1,
        (
            Compute("compute1", 24, 98304, 1500, cpu_ratio=8.0, traits=("CUSTOM_RACK_C",)),
            Compute("compute2", 24, 98304, 1500, reserved_memory_mb=2048,
                    custom={"CUSTOM_FPGA": 1}),
        ),
        (("general", None, ("compute1", "compute2"), {"tier": "general"}),),
    ),
)

FLAVORS = (
    # name, vcpus, ram MB, disk GB, extra specs
    ("m1.tiny", 1, 512, 1, {}),
    ("m1.small", 1, 2048, 10, {}),
    ("m1.medium", 2, 4096, 20, {"hw:cpu_policy": "shared"}),
    ("m1.large", 4, 8192, 40, {"trait:CUSTOM_RACK_A": "required"}),
    ("g1.t4", 4, 16384, 40, {"resources:CUSTOM_GPU_T4": "1"}),
    ("m1.huge", 64, 524288, 100, {}),
)
