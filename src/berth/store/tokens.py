"""Bearer tokens: only a secret's hash is stored; the secret is shown once."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from sqlalchemy import Connection, insert, select, update

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import InvalidReferenceError, NotFoundError
from berth.store.records import TokenRow

ROLES = ("admin", "operator", "tenant", "reader", "agent", "vm", "group-admin")


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Tokens(Database):
    """Creating, looking up, listing and revoking tokens."""

    def create_token(
        self,
        name: str,
        role: str,
        project: str | None = None,
        *,
        ttl: float | None = None,
        hosts: tuple[str, ...] = (),
        vm: str | None = None,
        elastic_group: str | None = None,
    ) -> tuple[TokenRow, str]:
        """A new bearer token; the secret is returned once and only its hash is stored.

        `ttl` seconds from now it expires (None: never); an agent token needs `hosts`, the
        only hosts it may report for (docs/service.md, "Roles"); a vm token its `vm`, a
        group-admin token its `elastic_group` (docs/elastic.md, "API and CLI").
        """
        _check_token(role, project, ttl, hosts)
        _check_scope(role, vm, elastic_group)
        with self._write() as conn:
            if (
                elastic_group is not None
                and not conn.execute(
                    select(t.elastic_groups.c.name).where(t.elastic_groups.c.name == elastic_group)
                ).first()
            ):
                raise InvalidReferenceError("elastic_group", f"no elastic group {elastic_group!r}")
            return insert_token(
                conn, name, role, project, ttl=ttl, hosts=hosts, vm=vm, elastic_group=elastic_group
            )

    def lookup_token(self, secret: str) -> TokenRow | None:
        """The token of a secret; None if unknown, revoked or expired."""
        with self._read() as conn:
            r = conn.execute(select(t.tokens).where(t.tokens.c.hash == hash_token(secret))).first()
        if r is None or r.revoked:
            return None
        row = _row(r)
        return None if is_expired(row, time.time()) else row

    def list_tokens(self) -> list[TokenRow]:
        with self._read() as conn:
            rows = conn.execute(select(t.tokens).order_by(t.tokens.c.created_at))
            return [_row(r) for r in rows]

    def revoke_token(self, token_id: str) -> None:
        with self._write() as conn:
            res = conn.execute(
                update(t.tokens).where(t.tokens.c.id == token_id).values(revoked=True)
            )
            if res.rowcount == 0:
                raise NotFoundError("token", token_id)


def insert_token(
    conn: Connection,
    name: str,
    role: str,
    project: str | None = None,
    *,
    ttl: float | None = None,
    hosts: tuple[str, ...] = (),
    vm: str | None = None,
    elastic_group: str | None = None,
) -> tuple[TokenRow, str]:
    """Write a token in the caller's transaction (a VM's token is made with its record)."""
    secret = "berth_" + secrets.token_urlsafe(32)
    now = time.time()
    expires = None if ttl is None else now + ttl
    row = TokenRow(
        secrets.token_hex(8), name, role, project, False, now, expires, hosts, vm, elastic_group
    )
    conn.execute(
        insert(t.tokens).values(
            id=row.id,
            name=name,
            role=role,
            project=project,
            hash=hash_token(secret),
            revoked=False,
            created_at=row.created_at,
            expires_at=expires,
            hosts=list(hosts) if hosts else None,
            vm=vm,
            elastic_group=elastic_group,
        )
    )
    return row, secret


def is_expired(row: TokenRow, now: float) -> bool:
    return row.expires_at is not None and row.expires_at <= now


def _row(r: Any) -> TokenRow:
    hosts = tuple(r.hosts) if r.hosts else ()
    return TokenRow(
        r.id,
        r.name,
        r.role,
        r.project,
        bool(r.revoked),
        r.created_at,
        r.expires_at,
        hosts,
        r.vm,
        r.elastic_group,
    )


def _check_token(role: str, project: str | None, ttl: float | None, hosts: tuple[str, ...]) -> None:
    if role not in ROLES:
        raise InvalidReferenceError("role", f"must be one of {', '.join(ROLES)}")
    if role == "tenant" and not project:
        raise InvalidReferenceError("project", "a tenant token needs a project")
    if role == "agent" and not hosts:
        raise InvalidReferenceError("hosts", "an agent token needs the hosts it reports for")
    if role != "agent" and hosts:
        raise InvalidReferenceError("hosts", "only an agent token is scoped to hosts")
    if ttl is not None and not (0 < ttl < 1e10):
        raise InvalidReferenceError("ttl", f"must be a positive number of seconds, not {ttl}")


def _check_scope(role: str, vm: str | None, elastic_group: str | None) -> None:
    if (role == "vm") != (vm is not None):
        raise InvalidReferenceError("vm", "a vm token, and only a vm token, names its VM")
    if (role == "group-admin") != (elastic_group is not None):
        raise InvalidReferenceError(
            "elastic_group", "a group-admin token, and only one, names its elastic group"
        )
