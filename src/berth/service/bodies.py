"""Response bodies built from stored rows, shared by several routers: an instance, its cells."""

from __future__ import annotations

from typing import Any

from berth.service import schemas as s
from berth.store.defrag import migrating_instance
from berth.store.footprint import Footprint
from berth.store.repo import InstanceRow, ServerRecord

_CELL_USE = ("vcpus", "pcpus", "memory_mb", "hugepages_mb")


def cell_dicts(fp: Footprint) -> list[dict[str, Any]]:
    """The footprint's cells that hold anything, each with its index, as plain JSON data."""
    return [
        {"cell": i, **c}
        for i, c in enumerate(fp["cells"])
        if any(c.get(k) for k in _CELL_USE) or c.get("pci")
    ]


def cells(fp: Footprint) -> list[s.CellUse]:
    """The footprint's cells that hold anything, as models."""
    return [s.CellUse(**c) for c in cell_dicts(fp)]


def server_out(r: ServerRecord) -> s.ServerOut:
    return s.ServerOut(
        instance_id=r.instance_id,
        cluster=r.cluster,
        server_id=r.server_id,
        host=r.host,
        flavor=r.flavor,
        state=r.state,
        fault=r.fault,
        alternates=list(r.alternates),
        tried=[dict(t) for t in r.tried],
    )


def instance_out(row: InstanceRow, server: ServerRecord | None = None) -> s.InstanceOut:
    return s.InstanceOut(
        id=row.id,
        project=row.project,
        flavor=row.flavor,
        host=row.host,
        cluster=row.cluster,
        deployment_set=row.server_group,
        placement_id=row.placement_id,
        business_type=row.business_type,
        preemptible=row.preemptible,
        cells=cells(row.placement),
        host_use=row.placement["host"],
        created_at=row.created_at,
        migration_of=migrating_instance(row.id),
        server=None if server is None else server_out(server),
    )
