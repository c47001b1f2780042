"""`OpenStackCloud`: the cloud driver interface over one OpenStack cluster (docs/openstack.md)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openstack
from openstack.connection import Connection

from berth.cloud.driver import (
    BootRequest,
    Change,
    ChangeBatch,
    CloudError,
    CloudErrorKind,
    HostChanged,
    Server,
    ServerChanged,
    ServerGone,
    ServerState,
)
from berth.cloud.openstack import reading
from berth.cloud.openstack.config import COMPUTE_MICROVERSION, OpenStackConfig
from berth.cloud.openstack.errors import calling, fault_kind
from berth.cloud.openstack.feed import ChangeLog, NotificationListener
from berth.cloud.openstack.fleet import FleetParts, Provider, build_fleet
from berth.cloud.openstack.servers import BERTH_NAME, BERTH_PROJECT, server_from_api
from berth.core.model import Fleet

POLL_SLACK = 5.0
"""Seconds a first `changes-since` poll looks back (clock skew between Berth and Nova)."""


def connect(config: OpenStackConfig) -> Connection:
    options: dict[str, Any] = {
        "auth_type": config.auth_type,
        "auth": dict(config.auth),
        "region_name": config.region,
        "compute_api_version": COMPUTE_MICROVERSION,
        "api_timeout": config.timeout,
        "compute_endpoint_override": config.compute,
        "placement_endpoint_override": config.placement,
    }
    if config.image:
        options["image_endpoint_override"] = config.image
    return openstack.connect(**options)


class OpenStackCloud:
    """One OpenStack cluster. Host names are Berth's (`config.prefix` + Nova's host)."""

    def __init__(self, config: OpenStackConfig, *, notifications: bool = True) -> None:
        self.config = config
        self.conn = connect(config)
        self._prefix = config.prefix
        self._log = ChangeLog()
        self._listener: NotificationListener | None = None
        self._poll_seen: dict[str, str] = {}
        self._poll_services: dict[str, bool] = {}
        self._flavor_ids: dict[str, str] = {}
        self._providers: dict[str, Provider] = {}  # the last import's, by uuid (generations)
        self._lock = threading.Lock()
        if notifications and config.transport_url:
            self._listener = NotificationListener(
                config.transport_url,
                config.notification_exchange,
                config.notification_topic,
                self._prefix,
                self._log,
            )
            self._listener.start()

    # ---- reading ----------------------------------------------------------------------------
    @property
    def cluster(self) -> str:
        return self.config.cluster

    @property
    def notifications(self) -> bool:
        return self._listener is not None

    def wait_listening(self, timeout: float = 10.0) -> bool:
        """True once the notification queue is bound (changes after this are heard)."""
        return self._listener is not None and self._listener.ready.wait(timeout)

    def inventory(self) -> Fleet:
        return build_fleet(self.read_parts())

    def read_parts(self) -> FleetParts:
        """What `inventory` maps, as read (for tests and the benchmark)."""
        with ThreadPoolExecutor(2) as pool:  # Nova's listings while Placement is read
            nova_hosts = pool.submit(reading.nova_hosts, self.conn)
            listed = pool.submit(reading.servers, self.conn)
            cat = reading.catalogue(self.conn)
            aggregates = [a["uuid"] for a in cat["aggregates"] if a.get("uuid")]
            providers = reading.providers(self.conn, aggregates, known=self._providers)
            self._providers = {p.uuid: p for p in providers}
            hosts, bodies = nova_hosts.result(), listed.result()
        members = reading.members_of(cat["groups"])
        return FleetParts(
            prefix=self._prefix,
            providers=providers,
            nova_hosts=hosts,
            aggregates=cat["aggregates"],
            flavors=cat["flavors"],
            groups=cat["groups"],
            servers=[server_from_api(b, self._prefix, members) for b in bodies],
            embedded_flavors={b["id"]: b["flavor"] for b in bodies if b.get("flavor")},
        )

    def servers(self) -> list[Server]:
        """Every server, with its server group (Nova's listing has none: one more GET)."""
        members = reading.group_members(self.conn)
        return sorted(
            (server_from_api(b, self._prefix, members) for b in reading.servers(self.conn)),
            key=lambda s: s.id,
        )

    def server(self, server_id: str) -> Server:
        body = reading.compute_get(self.conn, f"/servers/{server_id}")["server"]
        return server_from_api(body, self._prefix)

    # ---- acting -----------------------------------------------------------------------------
    def local_host(self, host: str) -> str:
        """Nova's name of one of Berth's hosts in this cluster."""
        if not host.startswith(self._prefix) or host == self._prefix:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no host {host!r} in {self.cluster}")
        return host[len(self._prefix) :]

    def _flavor_id(self, name: str) -> str:
        """Nova's id of the flavor `name`, from a cached listing (a boot then costs one call;
        a boot that fails drops the cache, in case the flavor was made again)."""
        found = self._flavor_ids.get(name)
        if found is None:
            listed = reading.paged(self.conn, "/flavors", "flavors", is_public="None")
            self._flavor_ids = {f["name"]: str(f["id"]) for f in listed}
            found = self._flavor_ids.get(name)
        if found is None:
            raise CloudError(CloudErrorKind.REFUSED, f"no flavor {name!r} in {self.cluster}")
        return found

    def boot(self, request: BootRequest) -> Server:
        host = self.local_host(request.host)
        image = request.image or self.config.boot_image
        if image is None:
            raise CloudError(CloudErrorKind.REFUSED, "no image: set boot_image or request.image")
        attrs: dict[str, Any] = {
            "name": request.name,
            "flavor_id": self._flavor_id(request.flavor),
            "image_id": image,
            "networks": "none",
            "host": host,
            "metadata": {
                **dict(request.metadata),
                BERTH_NAME: request.name,
                BERTH_PROJECT: request.project,
            },
        }
        if request.server_group:
            attrs["scheduler_hints"] = {"group": request.server_group}
        try:
            with calling(f"boot {request.name} on {request.host}"):
                created = self.conn.compute.create_server(**attrs)
        except CloudError:
            self._flavor_ids = {}
            raise
        return Server(
            id=str(created.id),
            name=request.name,
            host=request.host,
            flavor=request.flavor,
            state=ServerState.BUILDING,
            project=request.project,
            server_group=request.server_group,
            metadata=attrs["metadata"],
        )

    def delete(self, server_id: str) -> None:
        with calling(f"delete {server_id}", server_id):
            self.conn.compute.delete_server(server_id, ignore_missing=False)

    def live_migrate(self, server_id: str, host: str) -> None:
        target = self.local_host(host)
        with calling(f"live-migrate {server_id} to {host}", server_id):
            self.conn.compute.live_migrate_server(server_id, host=target, block_migration="auto")

    def set_host_enabled(self, host: str, enabled: bool, reason: str = "") -> None:
        local = self.local_host(host)
        found = [s for s in reading.compute_services(self.conn) if s["host"] == local]
        if not found:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no compute service on {host!r}")
        body: dict[str, Any] = {"status": "enabled" if enabled else "disabled"}
        if not enabled and reason:
            body["disabled_reason"] = reason
        with calling(f"{'enable' if enabled else 'disable'} {host}"):
            resp = self.conn.compute.put(
                f"/os-services/{found[0]['id']}", json=body, microversion=COMPUTE_MICROVERSION
            )
            resp.raise_for_status()

    def set_host_power(self, host: str, on: bool) -> None:
        raise CloudError(
            CloudErrorKind.UNSUPPORTED,
            "Nova has no host power API (use the hardware's BMC; docs/openstack.md)",
        )

    def wait_for(self, server_id: str, timeout: float = 60.0, interval: float = 0.25) -> Server:
        """Poll until the server is ACTIVE (returned) or ERROR (raised with its fault's kind)."""
        deadline = time.monotonic() + timeout
        faulted = False
        while True:
            server = self.server(server_id)
            if server.state is ServerState.ACTIVE:
                return server
            if server.state is ServerState.ERROR and server.fault is None and not faulted:
                faulted = True  # Nova writes the fault just after the state: read it once more
                time.sleep(interval)
                continue
            if server.state is ServerState.ERROR:
                raise CloudError(
                    fault_kind(server), server.fault or "build failed", server_id=server_id
                )
            if time.monotonic() > deadline:
                raise CloudError(
                    CloudErrorKind.UNREACHABLE,
                    f"server {server_id} still {server.state.value}",
                    server_id=server_id,
                )
            time.sleep(interval)

    # ---- the change feed ----------------------------------------------------------------------
    def changes(self, cursor: str | None, timeout: float = 0.0) -> ChangeBatch:
        """Notifications when listening (cursor `n:...`), else one `changes-since` poll."""
        if self._listener is not None:
            return self._log.read(cursor, timeout)
        return self.poll(cursor)

    def poll(self, cursor: str | None) -> ChangeBatch:
        """Servers changed since the cursor's time (Nova's `changes-since`, deleted ones too)
        and compute services whose enabled/up state moved since the last poll."""
        with self._lock:
            if cursor and cursor.startswith("p:"):
                since = cursor[2:]
            else:
                start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=POLL_SLACK)
                since = start.strftime("%Y-%m-%dT%H:%M:%SZ")
            bodies = reading.servers(self.conn, **{"changes-since": since})
            changes: list[Change] = []
            newest = since
            for body in sorted(bodies, key=lambda b: b.get("updated", "")):
                updated = body.get("updated") or since
                newest = max(newest, updated)
                if self._poll_seen.get(body["id"]) == updated:
                    continue  # `changes-since` is inclusive: seen at the boundary already
                self._poll_seen[body["id"]] = updated
                server = server_from_api(body, self._prefix)
                if server.state is ServerState.DELETED:
                    changes.append(ServerGone(server.id, server.name))
                else:
                    changes.append(ServerChanged(server))
            changes.extend(self._service_changes())
            return ChangeBatch(changes, f"p:{newest}")

    def _service_changes(self) -> list[Change]:
        out: list[Change] = []
        for s in reading.compute_services(self.conn):
            usable = s["status"] == "enabled" and s["state"] == "up"
            before = self._poll_services.get(s["host"])
            self._poll_services[s["host"]] = usable
            if before is not None and before != usable:
                out.append(HostChanged(f"{self._prefix}{s['host']}", enabled=usable))
        return out

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener.join(timeout=5)
        self.conn.close()


def from_stack(entry: Mapping[str, Any], **kwargs: Any) -> OpenStackCloud:
    """A driver for one cluster of scripts/ensure-openstack.sh's clusters.json."""
    notifications = kwargs.pop("notifications", True)
    return OpenStackCloud(OpenStackConfig.from_stack(entry, **kwargs), notifications=notifications)
