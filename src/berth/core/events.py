"""Change events that keep a cached `HostTable` exact without re-reading the world.

Every change to a host bumps its generation by one, and each event carries the generation the
host has after the change. Applying an event whose generation is not newer is a no-op (a stale or
duplicate report never overwrites newer state); an event that skips generations means some were
missed, and the cache asks for a full refresh instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from berth.core.model import Host

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class InstanceClaimed:
    host: str
    generation: int
    instance_id: str
    flavor: str
    cell_use: I64 = field(compare=False)
    host_use: I64 = field(compare=False)
    server_group: str | None = None
    project: str = "default"


@dataclass(frozen=True)
class InstanceReleased:
    host: str
    generation: int
    instance_id: str


@dataclass(frozen=True)
class HostStateChanged:
    host: str
    generation: int
    enabled: bool


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeats do not bump generations; older timestamps are ignored by the table."""

    host: str
    timestamp: float


@dataclass(frozen=True)
class HostAdded:
    host: Host
    aggregate_metadata: dict[str, dict[str, str]] = field(default_factory=dict)


Event = InstanceClaimed | InstanceReleased | HostStateChanged | Heartbeat | HostAdded
