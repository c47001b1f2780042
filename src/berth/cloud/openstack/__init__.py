"""The OpenStack cloud driver: Nova and Placement through openstacksdk, notifications through
kombu (docs/openstack.md)."""

from berth.cloud.openstack.config import OpenStackConfig
from berth.cloud.openstack.driver import OpenStackCloud, connect, from_stack
from berth.cloud.openstack.errors import fault_kind

__all__ = ["OpenStackCloud", "OpenStackConfig", "connect", "fault_kind", "from_stack"]
