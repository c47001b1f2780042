"""An in-process cloud: a real `CloudDriver` with no hypervisor behind it.

It keeps servers on hosts, refuses what a cloud would refuse (an unknown flavor or host, a host
that is disabled, powered off or out of vCPUs or memory), takes `boot_seconds` to turn a server
ACTIVE, and logs every change for `changes`. Hooks let a test or a demo attach something real to
a server's life — the elastic pools' tests start a real batch worker for each booted "VM"
(docs/elastic.md). `fail_boots` makes the next boots fail, to exercise retries and backoff.

The clock is injected (`clock`), so a simulation can run it in virtual time.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from berth.cloud.driver import (
    BootRequest,
    Change,
    ChangeBatch,
    CloudError,
    CloudErrorKind,
    HostChanged,
    HostPower,
    Resync,
    Server,
    ServerChanged,
    ServerGone,
    ServerState,
)
from berth.core.model import Flavor, Fleet, Host, Instance

ServerHook = Callable[[Server], None]


def host_capacity(host: Host) -> tuple[float, int]:
    """(vCPUs, memory MB) a host offers guests: its cells times the allocation ratios."""
    cpus = sum(c.shared_cpus + c.dedicated_cpus for c in host.numa_cells)
    memory = sum(c.memory_mb + c.hugepages_mb for c in host.numa_cells)
    usable_memory = int(memory * host.ram_allocation_ratio) - host.reserved_memory_mb
    return cpus * host.cpu_allocation_ratio, usable_memory


class SimulatedCloud:
    """One simulated cluster over a `Fleet` (its hosts, flavors and existing instances)."""

    def __init__(
        self,
        cluster: str,
        fleet: Fleet,
        *,
        boot_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_boot: ServerHook | None = None,
        on_delete: ServerHook | None = None,
    ) -> None:
        self._cluster = cluster
        self._hosts = {h.name: h for h in fleet.hosts}
        self._flavors = {f.name: f for f in fleet.flavors}
        self._groups = list(fleet.server_groups)
        self._aggregates = list(fleet.aggregates)  # the hosts name them: the inventory keeps them
        self._pci_aliases = list(fleet.pci_aliases)
        self._power = dict.fromkeys(self._hosts, HostPower.ON)
        self._boot_seconds = boot_seconds
        self._clock = clock
        self._on_boot = on_boot
        self._on_delete = on_delete
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._servers: dict[str, Server] = {}
        self._ready_at: dict[str, float] = {}
        self._log: list[Change] = []
        self._log_start = 0  # cursor of self._log[0]; `forget_changes` moves it
        self.fail_boots = 0  # the next N boots end in ERROR after being accepted
        for inst in fleet.instances:
            sid = f"{cluster}-{next(self._ids)}"
            self._servers[sid] = Server(
                sid,
                inst.id,
                inst.host,
                inst.flavor,
                ServerState.ACTIVE,
                inst.project,
                inst.server_group,
            )

    # ---- reading ----------------------------------------------------------------------------
    @property
    def cluster(self) -> str:
        return self._cluster

    def inventory(self) -> Fleet:
        with self._lock:
            self._settle()
            hosts = [
                h.model_copy(update={"enabled": h.enabled and self._power[h.name] is HostPower.ON})
                for h in self._hosts.values()
            ]
            instances = [
                Instance(
                    id=s.name,
                    host=s.host,
                    flavor=s.flavor,
                    project=s.project,
                    server_group=s.server_group,
                )
                for s in self._servers.values()
                if s.host is not None and s.state is not ServerState.ERROR
            ]
            return Fleet(
                aggregates=self._aggregates,
                pci_aliases=self._pci_aliases,
                hosts=hosts,
                flavors=list(self._flavors.values()),
                server_groups=self._groups,
                instances=instances,
            )

    def servers(self) -> list[Server]:
        with self._lock:
            self._settle()
            return sorted(self._servers.values(), key=lambda s: s.id)

    def power(self, host: str) -> HostPower:
        with self._lock:
            return self._power[self._host(host).name]

    def changes(self, cursor: str | None, timeout: float = 0.0) -> ChangeBatch:
        position = int(cursor) if cursor else self._log_start
        deadline = time.monotonic() + timeout
        with self._wake:
            while True:
                self._settle()
                end = self._log_start + len(self._log)
                if position < self._log_start:
                    return ChangeBatch([Resync("changes before the cursor were dropped")], str(end))
                if position < end or timeout <= 0:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(min(left, 0.05))
            return ChangeBatch(list(self._log[position - self._log_start :]), str(end))

    # ---- acting -----------------------------------------------------------------------------
    def boot(self, request: BootRequest) -> Server:
        with self._lock:
            flavor = self._flavors.get(request.flavor)
            if flavor is None:
                raise CloudError(CloudErrorKind.REFUSED, f"no flavor {request.flavor!r}")
            host = self._host(request.host)
            self._check_room(host, flavor, ignore=None)
            if any(s.name == request.name for s in self._servers.values()):
                raise CloudError(CloudErrorKind.REFUSED, f"a server named {request.name!r} exists")
            sid = f"{self._cluster}-{next(self._ids)}"
            failing = self.fail_boots > 0
            self.fail_boots -= 1 if failing else 0
            server = Server(
                sid,
                request.name,
                host.name,
                flavor.name,
                ServerState.ERROR if failing else ServerState.BUILDING,
                request.project,
                request.server_group,
                dict(request.metadata),
                fault="simulated build failure" if failing else None,
            )
            self._servers[sid] = server
            self._ready_at[sid] = self._clock() + self._boot_seconds
            self._record(ServerChanged(server))
            self._settle()
            return self._servers[sid]

    def delete(self, server_id: str) -> None:
        with self._lock:
            server = self._server(server_id)
            del self._servers[server_id]
            self._ready_at.pop(server_id, None)
            self._record(ServerGone(server_id, server.name))
        if self._on_delete is not None and server.state is not ServerState.ERROR:
            self._on_delete(server)

    def live_migrate(self, server_id: str, host: str) -> None:
        with self._lock:
            server = self._server(server_id)
            if server.state is not ServerState.ACTIVE:
                raise CloudError(
                    CloudErrorKind.REFUSED,
                    f"server {server_id} is {server.state.value}",
                    server_id=server_id,
                )
            target = self._host(host)
            if target.name == server.host:
                raise CloudError(CloudErrorKind.REFUSED, f"server {server_id} is already there")
            self._check_room(target, self._flavors[server.flavor], ignore=server_id)
            moved = replace(server, host=target.name)
            self._servers[server_id] = moved
            self._record(ServerChanged(moved))

    def set_host_enabled(self, host: str, enabled: bool, reason: str = "") -> None:
        with self._lock:
            h = self._host(host)
            if h.enabled != enabled:
                self._hosts[h.name] = h.model_copy(update={"enabled": enabled})
                self._record(HostChanged(h.name, enabled=enabled))

    def set_host_power(self, host: str, on: bool) -> None:
        with self._lock:
            h = self._host(host)
            wanted = HostPower.ON if on else HostPower.OFF
            if not on and any(s.host == h.name for s in self._servers.values()):
                raise CloudError(CloudErrorKind.REFUSED, f"host {host} has servers on it")
            if self._power[h.name] is not wanted:
                self._power[h.name] = wanted
                self._record(HostChanged(h.name, power=wanted))

    def forget_changes(self) -> None:
        """Drop the change log, as a notification bus that lost messages would."""
        with self._lock:
            self._log_start += len(self._log)
            self._log.clear()

    # ---- inside -----------------------------------------------------------------------------
    def _host(self, name: str) -> Host:
        host = self._hosts.get(name)
        if host is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no host {name!r} in {self._cluster}")
        return host

    def _server(self, server_id: str) -> Server:
        server = self._servers.get(server_id)
        if server is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no server {server_id!r}")
        return server

    def _check_room(self, host: Host, flavor: Flavor, ignore: str | None) -> None:
        if not host.enabled:
            raise CloudError(CloudErrorKind.REFUSED, f"host {host.name} is disabled")
        if self._power[host.name] is HostPower.OFF:
            raise CloudError(CloudErrorKind.REFUSED, f"host {host.name} is powered off")
        cpus, memory = host_capacity(host)
        for s in self._servers.values():
            if s.host == host.name and s.id != ignore and s.state is not ServerState.ERROR:
                used = self._flavors[s.flavor]
                cpus -= used.vcpus
                memory -= used.memory_mb
        if flavor.vcpus > cpus or flavor.memory_mb > memory:
            raise CloudError(
                CloudErrorKind.REFUSED,
                f"host {host.name} has {cpus:g} vCPUs and {memory} MB free; "
                f"{flavor.name} needs {flavor.vcpus} and {flavor.memory_mb}",
            )

    def _record(self, change: Change) -> None:
        self._log.append(change)
        self._wake.notify_all()

    def _settle(self) -> None:
        """Turn servers whose boot time has passed ACTIVE (and run the boot hook for them)."""
        now = self._clock()
        ready = [
            sid
            for sid, at in self._ready_at.items()
            if at <= now and self._servers[sid].state is ServerState.BUILDING
        ]
        for sid in sorted(ready):
            active = replace(self._servers[sid], state=ServerState.ACTIVE)
            self._servers[sid] = active
            del self._ready_at[sid]
            self._record(ServerChanged(active))
            if self._on_boot is not None:
                self._on_boot(active)
