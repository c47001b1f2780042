"""Bearer tokens: only a secret's hash is stored; the secret is shown once."""

from __future__ import annotations

import hashlib
import secrets
import time

from sqlalchemy import insert, select, update

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import InvalidReferenceError, NotFoundError
from berth.store.records import TokenRow

ROLES = ("admin", "operator", "tenant", "reader")


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Tokens(Database):
    """Creating, looking up, listing and revoking tokens."""

    def create_token(
        self, name: str, role: str, project: str | None = None
    ) -> tuple[TokenRow, str]:
        """A new bearer token; the secret is returned once and only its hash is stored."""
        if role not in ROLES:
            raise InvalidReferenceError("role", f"must be one of {', '.join(ROLES)}")
        if role == "tenant" and not project:
            raise InvalidReferenceError("project", "a tenant token needs a project")
        secret = "berth_" + secrets.token_urlsafe(32)
        row = TokenRow(secrets.token_hex(8), name, role, project, False, time.time())
        with self._write() as conn:
            conn.execute(
                insert(t.tokens).values(
                    id=row.id,
                    name=name,
                    role=role,
                    project=project,
                    hash=hash_token(secret),
                    revoked=False,
                    created_at=row.created_at,
                )
            )
        return row, secret

    def lookup_token(self, secret: str) -> TokenRow | None:
        with self._read() as conn:
            r = conn.execute(select(t.tokens).where(t.tokens.c.hash == hash_token(secret))).first()
        if r is None or r.revoked:
            return None
        return TokenRow(r.id, r.name, r.role, r.project, bool(r.revoked), r.created_at)

    def list_tokens(self) -> list[TokenRow]:
        with self._read() as conn:
            rows = conn.execute(select(t.tokens).order_by(t.tokens.c.created_at))
            return [
                TokenRow(r.id, r.name, r.role, r.project, bool(r.revoked), r.created_at)
                for r in rows
            ]

    def revoke_token(self, token_id: str) -> None:
        with self._write() as conn:
            res = conn.execute(
                update(t.tokens).where(t.tokens.c.id == token_id).values(revoked=True)
            )
            if res.rowcount == 0:
                raise NotFoundError("token", token_id)
