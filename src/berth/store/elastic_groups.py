"""Elastic groups (VQuota): each group's bounds, VM shape and queue; the global cap."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, func, insert, select, update

from berth.elastic.model import TERMINAL, GroupSpec
from berth.store import schema as t
from berth.store.db import Database
from berth.store.elastic_rows import ElasticGroupRow, ElasticLimits, group_record, queue_json
from berth.store.errors import InUseError, InvalidReferenceError, NotFoundError

LIMITS = ("max_vms", "max_cores")


class ElasticGroups(Database):
    """Groups and their quotas; the global cap."""

    def put_elastic_group(self, spec: GroupSpec, cluster: str | None = None) -> ElasticGroupRow:
        """Create or replace a group's definition (its VMs keep running; quotas apply from the
        next control cycle)."""
        check_group(spec)
        now = time.time()
        values: dict[str, Any] = {
            "flavor": spec.flavor,
            "image": spec.image,
            "cores_per_vm": spec.cores_per_vm,
            "slots_per_vm": spec.slots_per_vm,
            "min_vms": spec.min_vms,
            "max_vms": spec.max_vms,
            "max_cores": spec.max_cores,
            "share": spec.share,
            "queue": queue_json(spec.queue),
            "cluster": cluster,
            "updated_at": now,
        }
        with self._write() as conn:
            found = conn.execute(
                select(t.elastic_groups.c.name)
                .where(t.elastic_groups.c.name == spec.name)
                .with_for_update()
            ).first()
            if found is None:
                conn.execute(
                    insert(t.elastic_groups).values(name=spec.name, created_at=now, **values)
                )
            else:
                conn.execute(
                    update(t.elastic_groups)
                    .where(t.elastic_groups.c.name == spec.name)
                    .values(**values)
                )
            row = conn.execute(
                select(t.elastic_groups).where(t.elastic_groups.c.name == spec.name)
            ).one()
            return group_record(row)

    def get_elastic_group(self, name: str) -> ElasticGroupRow:
        with self._read() as conn:
            row = conn.execute(
                select(t.elastic_groups).where(t.elastic_groups.c.name == name)
            ).first()
        if row is None:
            raise NotFoundError("elastic group", name)
        return group_record(row)

    def list_elastic_groups(self) -> list[ElasticGroupRow]:
        with self._read() as conn:
            rows = conn.execute(select(t.elastic_groups).order_by(t.elastic_groups.c.name))
            return [group_record(r) for r in rows]

    def delete_elastic_group(self, name: str) -> None:
        """Remove a group that has no live VM (409 `in_use` otherwise); its history stays."""
        with self._write() as conn:
            live = conn.execute(
                select(func.count())
                .select_from(t.elastic_vms)
                .where(
                    t.elastic_vms.c.group == name,
                    t.elastic_vms.c.state.not_in([s.value for s in TERMINAL]),
                )
            ).scalar_one()
            if live:
                raise InUseError(f"elastic group {name!r} has {live} live VMs")
            vms = select(t.elastic_vms.c.name).where(t.elastic_vms.c.group == name)
            conn.execute(delete(t.elastic_commands).where(t.elastic_commands.c.vm.in_(vms)))
            conn.execute(delete(t.elastic_vms).where(t.elastic_vms.c.group == name))
            res = conn.execute(delete(t.elastic_groups).where(t.elastic_groups.c.name == name))
            if res.rowcount == 0:
                raise NotFoundError("elastic group", name)

    def set_elastic_limits(self, limits: ElasticLimits) -> ElasticLimits:
        for key in LIMITS:
            value = getattr(limits, key)
            if value is not None and value < 0:
                raise InvalidReferenceError(key, f"must be >= 0 or unset, not {value}")
        with self._write() as conn:
            for key in LIMITS:
                conn.execute(delete(t.elastic_settings).where(t.elastic_settings.c.name == key))
                conn.execute(
                    insert(t.elastic_settings).values(name=key, value=getattr(limits, key))
                )
        return limits

    def elastic_limits(self) -> ElasticLimits:
        with self._read() as conn:
            rows = conn.execute(select(t.elastic_settings)).all()
        values = {r.name: r.value for r in rows if r.name in LIMITS}
        return ElasticLimits(**values)


def check_group(spec: GroupSpec) -> None:
    """A group definition that makes sense, or `InvalidReferenceError` naming the field."""
    if not spec.name or len(spec.name) > 255:
        raise InvalidReferenceError("name", "a group needs a name of 1-255 characters")
    for key in ("cores_per_vm", "slots_per_vm"):
        if getattr(spec, key) < 1:
            raise InvalidReferenceError(key, f"must be >= 1, not {getattr(spec, key)}")
    if spec.min_vms < 0 or spec.max_vms < 0:
        raise InvalidReferenceError("min_vms", "min_vms and max_vms must be >= 0")
    if spec.min_vms > spec.max_vms:
        raise InvalidReferenceError(
            "min_vms", f"min_vms ({spec.min_vms}) is above max_vms ({spec.max_vms})"
        )
    if spec.max_cores is not None and spec.max_cores < 0:
        raise InvalidReferenceError("max_cores", f"must be >= 0 or unset, not {spec.max_cores}")
    if not spec.share > 0:
        raise InvalidReferenceError("share", f"must be > 0, not {spec.share}")
