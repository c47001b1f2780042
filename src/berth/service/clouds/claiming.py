"""A claim on one chosen host, outside the decide-and-commit loop: an alternate after a boot
the cloud refused, a server found running that Berth did not know, a server the cloud moved.

The footprint is Berth's claim rule on that host (`HostTable.plan_for`), checked against the
replica's table, and committed with the host's generation as read (`Store.commit_placement`);
a lost race syncs and tries again. A claim that does not fit is `ClaimRefusedError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from berth.core.errors import ClaimError, SpecError
from berth.service.clouds.errors import ClaimRefusedError
from berth.service.replica import Replica
from berth.store.errors import GenerationConflictError, PlanRejectedError
from berth.store.footprint import to_named
from berth.store.repo import (
    CommitResult,
    HostCapacity,
    InstanceRow,
    NewInstance,
    instance_set_key,
)

ATTEMPTS = 4


@dataclass(frozen=True)
class Claim:
    """What to claim for one instance (its id is also its server's name)."""

    instance_id: str
    cluster: str
    flavor: str
    project: str = "default"
    server_group: str | None = None
    placement_id: str | None = None
    business_type: str = "on-demand"
    preemptible: bool = False
    migratable: bool = True
    created_at: float | None = None

    @classmethod
    def of(cls, row: InstanceRow) -> Claim:
        return cls(
            row.id,
            row.cluster,
            row.flavor,
            row.project,
            row.server_group,
            row.placement_id,
            row.business_type,
            row.preemptible,
            row.migratable,
            row.created_at,
        )


def claim_on(replica: Replica, claim: Claim, host: str, *, check_set: bool = True) -> CommitResult:
    """Claim `claim` on exactly `host`; `ClaimRefusedError` when it does not fit there.
    `check_set=False`: its deployment set's policy is not checked (a server that already runs
    there joins its set as it is)."""
    last = ""
    for _ in range(ATTEMPTS):
        with replica.lock:
            if replica.needs_reload:
                replica.reload_locked()
            new, gens, groups, caps = _plan(replica, claim, host, check_set)
        try:
            result = replica.store.commit_placement(
                placement_id=claim.placement_id or "cloud",
                instances=[new],
                host_generations=gens,
                group_generations=groups,
                capacities=caps,
            )
        except (GenerationConflictError, PlanRejectedError) as exc:
            last = str(exc)
            replica.sync()
            continue
        with replica.lock:
            replica.apply_committed(result)
        return result
    raise ClaimRefusedError(f"host {host}: {last}")


def check_fits(replica: Replica, claim: Claim, host: str, *, check_set: bool = True) -> None:
    """`ClaimRefusedError` unless `claim` fits on `host` in the replica's table now."""
    replica.sync()
    with replica.lock:
        _plan(replica, claim, host, check_set)


def _plan(
    replica: Replica, claim: Claim, host: str, check_set: bool = True
) -> tuple[NewInstance, dict[str, int], dict[str, int], dict[str, HostCapacity]]:
    view = replica.clusters.get(claim.cluster)
    if view is None or host not in view.table.index:
        raise ClaimRefusedError(f"host {host} is not in cluster {claim.cluster}")
    table = view.table
    if claim.flavor not in table.flavors:
        raise ClaimRefusedError(f"flavor {claim.flavor} is not offered in {claim.cluster}")
    row = table.index[host]
    try:
        cell_use, host_use = table.plan_for(claim.flavor, row)
        table.verify_fits(host, cell_use, host_use)
    except (ClaimError, SpecError, ValueError) as exc:
        raise ClaimRefusedError(str(exc)) from None
    new = NewInstance(
        id=claim.instance_id,
        host=host,
        cluster=claim.cluster,
        flavor=claim.flavor,
        footprint=to_named(cell_use, host_use, table.device_types),
        project=claim.project,
        server_group=claim.server_group,
        business_type=claim.business_type,
        preemptible=claim.preemptible,
        migratable=claim.migratable,
        created_at=claim.created_at,
    )
    groups = {}
    key = instance_set_key(claim.project, claim.server_group)  # sets are known by key
    if check_set and key is not None and key in replica.groups:
        groups[key] = replica.groups[key].generation
    caps = {
        host: HostCapacity(
            table.cell_cap[row].copy(), table.host_cap[row].copy(), [*table.device_types]
        )
    }
    return new, {host: int(table.generation[row])}, groups, caps
