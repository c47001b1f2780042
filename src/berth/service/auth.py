"""Bearer-token authentication and the five roles.

Tokens are random secrets (`berth_...`); only their SHA-256 is stored, so a database dump does
not reveal a usable token. Lookups are cached for `token_cache_ttl` seconds: a token revoked on
one replica stops working there at once and on the others within that time. A cached token is
answered without I/O, so the service checks it on the event loop (`Authenticator.cached`).

* admin: everything, including tokens;
* operator: fleet changes (regions, clusters, pools, hosts, reports, flavors, images,
  networks), placements for any project, evictions, and every read;
* tenant: placements, instances and deployment sets of its own project; the catalogue;
* reader: every read except tokens;
* agent: only the reports (heartbeats) of the hosts it was created for;
* vm: only its own elastic VM's heartbeat, commands and results (the `berth agent` on it);
* group-admin: only its own elastic group: its quota, VMs, commands, accounting.

A token may expire (`expires_at`); an expired token is refused like an unknown one, from the
cache too (docs/service.md, "Tokens").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from berth.service.errors import ApiError
from berth.store.repo import Store, TokenRow, hash_token, is_expired

RANK = {
    "agent": -1,
    "vm": -1,
    "group-admin": -1,
    "reader": 0,
    "tenant": 0,
    "operator": 1,
    "admin": 2,
}
SCOPED = frozenset({"agent", "vm", "group-admin"})
"""Roles confined to their own hosts, VM or group: refused everywhere else."""


@dataclass(frozen=True)
class Principal:
    token_id: str
    name: str
    role: str
    project: str | None
    hosts: tuple[str, ...] = ()
    vm: str | None = None
    elastic_group: str | None = None

    @property
    def key(self) -> str:
        """Who an idempotency key belongs to."""
        return f"token:{self.token_id}"

    def project_for(self, requested: str | None) -> str:
        """The project a request acts for: a tenant's own; others must name one or get 'default'."""
        if self.role == "tenant":
            assert self.project is not None
            if requested is not None and requested != self.project:
                raise ApiError(
                    403,
                    "forbidden",
                    f"project: a tenant token of {self.project!r} cannot act for {requested!r}",
                    field="project",
                )
            return self.project
        return requested or "default"

    def visible_project(self) -> str | None:
        """None = every project is visible; else only this one."""
        return self.project if self.role == "tenant" else None


class Authenticator:
    def __init__(self, store: Store, ttl: float = 5.0) -> None:
        self.store = store
        self.ttl = ttl
        self._cache: dict[str, tuple[float, TokenRow | None]] = {}
        self._lock = threading.Lock()

    def authenticate(self, header: str | None) -> Principal:
        """The principal of an `Authorization` header; looks the token up on a cache miss."""
        secret = _secret(header)
        digest = hash_token(secret)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            row = cached[1]
        else:
            row = self.store.lookup_token(secret) if len(secret) < 200 else None
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (now + self.ttl, row)
        return _principal(row)

    def cached(self, header: str | None) -> Principal | None:
        """The principal if the cache answers (no I/O: safe on the event loop), else None.

        A missing header, or a token the cache knows to be unknown or revoked, is a 401 here.
        """
        secret = _secret(header)
        with self._lock:
            cached = self._cache.get(hash_token(secret))
        if cached is None or cached[0] <= time.monotonic():
            return None
        return _principal(cached[1])

    def forget(self, token_id: str) -> None:
        """Drop a token from this replica's cache (it was revoked here)."""
        with self._lock:
            for digest, (_, row) in list(self._cache.items()):
                if row is not None and row.id == token_id:
                    del self._cache[digest]


def _secret(header: str | None) -> str:
    if not header or not header.lower().startswith("bearer "):
        raise ApiError(
            401,
            "unauthenticated",
            "missing bearer token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return header[7:].strip()


def _principal(row: TokenRow | None) -> Principal:
    if row is None or is_expired(row, time.time()):
        raise ApiError(
            401,
            "unauthenticated",
            "unknown or revoked token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Principal(row.id, row.name, row.role, row.project, row.hosts, row.vm, row.elastic_group)


def require(principal: Principal, *, write: bool = False, admin: bool = False) -> None:
    """Fleet reads need any non-tenant role; fleet writes operator; token admin admin.

    An agent token passes none of these: only `require_reporter` admits it.
    """
    refuse_agent(principal)
    if admin and principal.role != "admin":
        raise ApiError(403, "forbidden", f"role {principal.role!r} cannot manage tokens")
    if write and RANK[principal.role] < 1:
        raise ApiError(403, "forbidden", f"role {principal.role!r} cannot change the fleet")
    if principal.role == "tenant" and not write and not admin:
        raise ApiError(403, "forbidden", "a tenant token cannot read the fleet")


def refuse_agent(principal: Principal) -> None:
    """403 for a scoped token: an agent may only send its hosts' reports, a vm token touch
    its VM, a group-admin token its elastic group."""
    if principal.role == "agent":
        raise ApiError(403, "forbidden", "an agent token can only report for its own hosts")
    if principal.role == "vm":
        raise ApiError(403, "forbidden", "a vm token can only touch its own VM")
    if principal.role == "group-admin":
        raise ApiError(403, "forbidden", "a group-admin token can only use its elastic group")


def require_vm(principal: Principal, vm: str) -> None:
    """A VM's agent routes: operator, admin, or the vm token of that VM."""
    if principal.role == "vm":
        if principal.vm != vm:
            raise ApiError(403, "forbidden", f"this vm token cannot touch vm {vm!r}")
        return
    require(principal, write=True)


def require_group(principal: Principal, group: str | None, *, write: bool = False) -> None:
    """An elastic group's routes: reads for any role but tenant, changes for operator and
    admin; a group-admin token reads and changes only its own group (`group` None: a route
    over every group, which a group-admin token sees filtered to its own)."""
    if principal.role == "group-admin":
        if group is not None and group != principal.elastic_group:
            raise ApiError(
                403, "forbidden", f"this group-admin token cannot use elastic group {group!r}"
            )
        return
    require(principal, write=write)


def require_reporter(principal: Principal, host: str) -> None:
    """Reports of `host`: operator, admin, or an agent token created for that host."""
    if principal.role == "agent":
        if host not in principal.hosts:
            raise ApiError(403, "forbidden", f"this agent token cannot report for host {host!r}")
        return
    require(principal, write=True)
