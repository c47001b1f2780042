"""The cloud driver interface: what Berth asks of one cluster, and what it hears back.

One driver instance stands for one cluster (its own endpoint and credentials). It is
deliberately small — Berth decides *where*; a driver only lists, boots, deletes, moves, and
reports what changed:

* `inventory()` — the cluster as Berth's fleet model (hosts with inventories, traits and
  aggregates; flavors; server groups; the servers already running, as instances).
* `servers()` — every server the cluster knows, with its host and state.
* `boot(request)` / `delete(server_id)` / `live_migrate(server_id, host)` — act on servers.
  `boot` returns once the cloud accepted the request; the server's life after that (building,
  active, error, deleted) arrives through `changes`.
* `set_host_enabled(host, enabled, reason)` — stop or resume scheduling on a host.
* `set_host_power(host, on)` — power a host off or on (tidal power management); a cloud that
  cannot raises `CloudError(kind=UNSUPPORTED)`.
* `changes(cursor, timeout)` — the change feed: every change after `cursor`, and the cursor to
  ask from next. A driver that lost changes (a notification gap, a restart) returns `Resync`, and
  the caller reconciles from `servers()`/`inventory()`.

Every call is synchronous and may block on the network; callers run drivers off their event
loop. Errors are `CloudError` with a `kind` that says what the caller may do next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from berth.core.model import Fleet


class ServerState(StrEnum):
    BUILDING = "building"
    ACTIVE = "active"
    MIGRATING = "migrating"
    SHUTOFF = "shutoff"
    ERROR = "error"
    DELETED = "deleted"


class HostPower(StrEnum):
    ON = "on"
    OFF = "off"


@dataclass(frozen=True)
class Server:
    """A server as the cloud reports it. `id` is the cloud's id; `name` is the name Berth gave."""

    id: str
    name: str
    host: str | None
    flavor: str
    state: ServerState
    project: str = "default"
    server_group: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    fault: str | None = None  # why the cloud put it in ERROR, when it says


@dataclass(frozen=True)
class BootRequest:
    """Boot `name` with `flavor` on exactly `host` (Berth chose it; the cloud must not move it)."""

    name: str
    flavor: str
    host: str
    project: str = "default"
    image: str | None = None
    server_group: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class CloudErrorKind(StrEnum):
    REFUSED = "refused"  # the cloud said no before building (host full/disabled, bad request)
    FAILED = "failed"  # accepted, then the build/migration failed
    NOT_FOUND = "not_found"  # no such server or host
    UNREACHABLE = "unreachable"  # the cloud did not answer: the outcome is unknown
    UNSUPPORTED = "unsupported"  # this cloud cannot do that


class CloudError(Exception):
    """A cloud call that did not do what was asked; `kind` says what to do next."""

    def __init__(self, kind: CloudErrorKind, message: str, *, server_id: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.server_id = server_id

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"


@dataclass(frozen=True)
class ServerChanged:
    """A server was created, changed state or host. Carries the server as it is now."""

    server: Server


@dataclass(frozen=True)
class ServerGone:
    server_id: str
    name: str


@dataclass(frozen=True)
class HostChanged:
    """A host's enabled/up state, power or inventory changed; re-read it with `inventory()`."""

    host: str
    enabled: bool | None = None
    power: HostPower | None = None


@dataclass(frozen=True)
class Resync:
    """Changes were lost (a gap, a restart): reconcile everything from the cloud's listings."""

    reason: str


Change = ServerChanged | ServerGone | HostChanged | Resync


@dataclass(frozen=True)
class ChangeBatch:
    changes: Sequence[Change]
    cursor: str  # pass back to `changes` to get what follows


@runtime_checkable
class CloudDriver(Protocol):
    """One cluster. Implementations: `simulated.SimulatedCloud`, `openstack` (docs/openstack.md)."""

    @property
    def cluster(self) -> str: ...

    def inventory(self) -> Fleet: ...

    def servers(self) -> list[Server]: ...

    def boot(self, request: BootRequest) -> Server: ...

    def delete(self, server_id: str) -> None: ...

    def live_migrate(self, server_id: str, host: str) -> None: ...

    def set_host_enabled(self, host: str, enabled: bool, reason: str = "") -> None: ...

    def set_host_power(self, host: str, on: bool) -> None: ...

    def changes(self, cursor: str | None, timeout: float = 0.0) -> ChangeBatch: ...
