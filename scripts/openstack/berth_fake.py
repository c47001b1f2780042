"""Nova's fake virt driver with host sizes from configuration (installed into nova.virt).

`fake.FakeDriverWithoutFakeNodes` restarts cleanly (a stable node UUID under its own
`state_path`) but reports 1,000 CPUs, 800 GB of memory and 600 TB of disk on every host. This
subclass reads `[berth_fake] vcpus, pcpus, memory_mb, local_gb` so that each compute of the test
stack has its own size, and reports `pcpus` of them as PCPU (dedicated) inventory. Nova imports
a compute driver as `nova.virt.<name>`, so scripts/openstack/stack.py copies this module there.
"""

import os_resource_classes as orc
from oslo_config import cfg

from nova.virt import fake

CONF = cfg.CONF
CONF.register_opts(
    [
        cfg.IntOpt("vcpus", default=16),
        cfg.IntOpt("pcpus", default=0),
        cfg.IntOpt("memory_mb", default=65536),
        cfg.IntOpt("local_gb", default=1000),
    ],
    group="berth_fake",
)


class BerthFakeDriver(fake.FakeDriverWithoutFakeNodes):
    def __init__(self, virtapi, read_only=False):
        self.vcpus = CONF.berth_fake.vcpus
        self.memory_mb = CONF.berth_fake.memory_mb
        self.local_gb = CONF.berth_fake.local_gb
        super().__init__(virtapi, read_only)

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        super().update_provider_tree(provider_tree, nodename, allocations)
        pcpus = CONF.berth_fake.pcpus
        if not pcpus:
            return
        inventory = dict(provider_tree.data(nodename).inventory)
        shared = self.vcpus - pcpus
        inventory["VCPU"] = dict(inventory["VCPU"], total=shared, max_unit=shared)
        inventory[orc.PCPU] = {
            "total": pcpus,
            "min_unit": 1,
            "max_unit": pcpus,
            "step_size": 1,
            "allocation_ratio": 1.0,
            "reserved": 0,
        }
        provider_tree.update_inventory(nodename, inventory)
