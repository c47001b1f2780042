"""Deployment sets (server groups): their rows and members. A set belongs to a project and is
known by (project, id): another project's set of the same id is another set."""

from __future__ import annotations

import time

from sqlalchemy import and_, delete, insert, select
from sqlalchemy.exc import IntegrityError

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import AlreadyExistsError, InUseError, NotFoundError
from berth.store.instances import an_instance
from berth.store.records import GroupRow, group_row


class Groups(Database):
    """Deployment sets; their generations are bumped by the claims that change them."""

    def add_group(self, group: GroupRow) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.deployment_sets).values(
                        id=group.id,
                        project=group.project,
                        policy=group.policy,
                        max_per_host=group.max_per_host,
                        max_size=group.max_size,
                        generation=0,
                        created_at=time.time(),
                        scope=group.scope,
                    )
                )
                payload = {
                    "id": group.id,
                    "project": group.project,
                    "policy": group.policy,
                    "max_per_host": group.max_per_host,
                    "max_size": group.max_size,
                    "scope": group.scope,
                }
                self._append(conn, [("group_added", None, None, payload)])
        except IntegrityError:
            raise AlreadyExistsError("deployment set", group.id) from None

    def delete_group(self, project: str, group_id: str) -> None:
        with self._write() as conn:
            used = an_instance(
                conn,
                and_(t.instances.c.project == project, t.instances.c.server_group == group_id),
            )
            if used is not None:
                raise InUseError(f"deployment set {group_id!r} still has instance {used!r}")
            res = conn.execute(
                delete(t.deployment_sets).where(
                    t.deployment_sets.c.project == project, t.deployment_sets.c.id == group_id
                )
            )
            if res.rowcount == 0:
                raise NotFoundError("deployment set", group_id)
            payload = {"id": group_id, "project": project}
            self._append(conn, [("group_deleted", None, None, payload)])

    def list_groups(self, project: str | None = None) -> list[GroupRow]:
        q = select(t.deployment_sets).order_by(t.deployment_sets.c.id, t.deployment_sets.c.project)
        if project is not None:
            q = q.where(t.deployment_sets.c.project == project)
        with self._read() as conn:
            return [group_row(r) for r in conn.execute(q)]

    def group_members(self, project: str, group_id: str) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.instances.c.id).where(
                    t.instances.c.project == project, t.instances.c.server_group == group_id
                )
            )
            return [r.id for r in rows]
