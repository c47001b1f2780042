"""What one `berth serve` process is configured with (`ServiceConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from berth.core.config import SchedulerConfig, profile
from berth.policy.model import Policy


@dataclass
class ServiceConfig:
    """What a replica needs to know; everything has a default that suits one node."""

    db_url: str
    replica_id: str = "replica-1"
    scheduler: SchedulerConfig = field(default_factory=lambda: profile("berth"))
    service_down_time: float = 60.0
    max_attempts: int = 8
    poll_interval: float = 0.5
    heartbeat_interval: float = 2.0
    reconcile_interval: float = 60.0
    cluster_order: str = "most_free"  # most_free | least_free | name
    token_cache_ttl: float = 5.0
    preemption: bool = True
    policy: Policy | None = None
    """The multi-cloud policy (`berth serve --policy FILE`): enables POST /v1/schedule."""
    replica_spread: float = 0.0
    """Weight of the replica-spread weigher (0: off); see `berth.service.spread`."""
    max_body_bytes: int = 4 << 20
    """Largest request body accepted (413 above it); a 10,000-instance report fits."""
    cloud_poll_interval: float = 1.0
    """Seconds a cluster's change feed waits for changes per poll (docs/openstack.md)."""
    cloud_reconcile_interval: float = 60.0
    """Seconds between full reconciliations of a cluster Berth drives with its cloud."""
    cloud_boot_grace: float = 30.0
    """Age (s) after which a claim without a server counts as a boot to resume, not one that
    another replica is still making."""
    cloud_build_timeout: float = 600.0
    """Seconds a server Berth booted may stay building before the boot counts as failed (the
    server deleted, the next alternate tried)."""
    why_all: bool = False
    """Record a compact why this host with every placement's outcome, asked or not
    (`berth serve --why-all`; docs/why.md, "In the decision stream")."""
    max_clock_skew: float = 300.0
    """How far (s) a host report's timestamp may be ahead of this replica's clock (422 beyond)."""
