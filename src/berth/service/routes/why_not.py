"""`GET /v1/why-not`: what would make a flavor fit, cluster by cluster (docs/why-not.md).

Read-only: each way out is planned and checked on copies of the replica's tables
(`berth.policy.why_not`); instances the store marks preemptible may be evicted; the flavor's
family comes from the policy's catalogue when the service runs with one, else from its name.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from berth.core.defrag.admit import MAX_ADMISSION
from berth.core.request import RequestSpec
from berth.policy.why_not import (
    WhyNotOptions,
    family_by_name,
    family_from_catalogue,
    why_not,
)
from berth.service import schemas as s
from berth.service.deps import Reader, ReplicaDep
from berth.service.errors import ApiError
from berth.service.policy_topology import policy_engine

router = APIRouter(prefix="/v1", tags=["capacity"])


@router.get("/why-not")
def why_not_route(
    _p: Reader,
    replica: ReplicaDep,
    flavor: Annotated[s.Ident, Query(description="the flavor that does not fit")],
    cluster: Annotated[s.Ident | None, Query(description="only this cluster")] = None,
    availability_zone: Annotated[s.Ident | None, Query()] = None,
    max_moves: Annotated[
        int, Query(ge=1, le=MAX_ADMISSION, description="most live migrations")
    ] = 3,
) -> dict[str, Any]:
    """For one instance of `flavor`, per candidate cluster: whether it fits now, else the
    checked ways out (enable a host, live migrations, evictions of preemptible instances, a
    smaller flavor of its family), least disruptive first."""
    if flavor not in replica.flavors:
        raise ApiError(422, "unknown_flavor", f"flavor: unknown flavor {flavor!r}", field="flavor")
    if cluster is not None and cluster not in replica.clusters:
        raise ApiError(
            422, "invalid_input", f"cluster: unknown cluster {cluster!r}", field="cluster"
        )
    engine = policy_engine(replica)
    t0 = time.perf_counter()
    answers: dict[str, Any] = {}
    with replica.lock:
        preemptible = dict(replica.preemptible)
        draining = frozenset(replica.draining)
        now = replica.clock()
        for view in replica.clusters.values():
            if cluster is not None and view.name != cluster:
                continue
            if view.state != "active" or flavor not in view.table.flavors:
                continue
            family = (
                family_from_catalogue(engine.catalogue, flavor)
                if engine is not None and flavor in engine.catalogue.origin
                else family_by_name(sorted(view.table.flavors), flavor)
            )
            answer = why_not(
                replica.scheduler,
                view.table,
                RequestSpec(
                    flavor=flavor,
                    availability_zone=availability_zone,
                    instance_ids=("why-not",),
                ),
                now,
                preemptible=(lambda a: a.instance_id in preemptible) if preemptible else None,
                family=family,
                options=WhyNotOptions(max_moves=max_moves, cluster=view.name, draining=draining),
            )
            answers[view.name] = answer.to_dict()
    return {
        "flavor": flavor,
        "fits_now": any(a["fits_now"] for a in answers.values()),
        "clusters": answers,
        "elapsed_ms": round((time.perf_counter() - t0) * 1e3, 3),
    }
