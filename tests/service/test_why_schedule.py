"""`POST /v1/schedule?why=true` through the real app on the policy demo (docs/why.md): the
breakdown equals `core.why` for the same decision, and the outcome row keeps it."""

from __future__ import annotations

import json
from typing import Any

from berth.core.request import RequestSpec
from berth.core.why import explain_placement
from berth.policy.restrict import restricted
from berth.service.policy_topology import policy_engine
from tests.service.conftest import Env
from tests.service.test_policy import NOW, penv, policy_db
from tests.service.test_why_routes import assert_kept

__all__ = ["penv", "policy_db"]


def _plain(data: Any) -> Any:
    return json.loads(json.dumps(data))


def test_schedule_why_equals_core_why_for_the_same_decision(penv: Env) -> None:
    engine = policy_engine(penv.replica)
    assert engine is not None
    before = {name: c.table.copy() for name, c in engine.topology.clusters.items()}
    resp = penv.post(
        "/v1/schedule",
        {"region": "beijing", "flavor": "v.c3.large", "count": 2, "seed": 11},
        params={"why": "true", "why_top": 4},
    )
    assert resp.status_code == 201, resp.text
    body = resp.json()
    # the same decision by hand: the core scheduler restricted to the chosen pool, on the
    # chosen cluster's table as it was, the same flavor, instance ids and seed
    cluster = engine.topology.clusters[body["cluster"]]
    traits = tuple(engine.catalogue.pools[body["pool"]].traits)
    scheduler = restricted(engine.scheduler, cluster.pool_mask(traits), "not in the pool")
    request = RequestSpec(
        flavor=body["flavor"],
        num_instances=2,
        project=body["project"],
        instance_ids=tuple(i["id"] for i in body["instances"]),
        seed=11,
    )
    decision, expected = explain_placement(scheduler, before[body["cluster"]], request, NOW, 4)
    assert decision.hosts == [i["host"] for i in body["instances"]]
    assert body["why"] == _plain([w.to_dict() for w in expected])
    [row] = penv.store.recent_outcomes(1)
    assert row.why is not None
    assert_kept(row.why, body["why"])
    # not asked: no why in the answer and none kept
    plain = penv.post("/v1/schedule", {"region": "beijing", "flavor": "v.c3.large"})
    assert plain.status_code == 201, plain.text
    assert "why" not in plain.json()
    assert penv.store.recent_outcomes(1)[0].why is None


def test_schedule_why_top_is_checked(penv: Env) -> None:
    resp = penv.post(
        "/v1/schedule",
        {"region": "beijing", "flavor": "v.c3.large"},
        params={"why": "true", "why_top": 51},
    )
    assert resp.status_code == 422
