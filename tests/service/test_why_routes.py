"""`POST /v1/placements?why=true` and `GET /v1/why-not` through the real app (docs/why.md,
docs/why-not.md)."""

from __future__ import annotations

from typing import Any

from berth.core.why import Part, Scale, fold
from tests.service.conftest import Env


def _fold(instance: dict[str, Any]) -> None:
    scales = [Scale(**s) for s in instance["scales"]]
    for cand in instance["ranked"]:
        parts = [Part(**p) for p in cand["parts"]]
        assert fold(parts, scales) == cand["score"]  # JSON floats round-trip exactly


def test_placement_why_explains_each_instance_and_adds_up(env: Env) -> None:
    resp = env.post(
        "/v1/placements",
        {"flavor": "c3.4xlarge.numa1", "count": 2},
        "alpha",
        params={"why": "true", "why_top": 4},
    )
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert len(body["why"]) == 2
    for inst, why in zip(body["instances"], body["why"], strict=True):
        assert why["instance_id"] == inst["id"]
        assert why["ranked"][0]["host"] == inst["host"]
        assert len(why["ranked"]) == 4
        assert why["draw"] in ("best", "tie")
        assert why["summary"].startswith(inst["id"])
        _fold(why)
    plain = env.post("/v1/placements", {"flavor": "c3.4xlarge.numa1"}, "alpha")
    assert "why" not in plain.json()  # not asked, not computed


def test_placement_why_top_is_checked(env: Env) -> None:
    resp = env.post("/v1/placements", {"flavor": "c3.large"}, params={"why": 1, "why_top": 1})
    assert resp.status_code == 422


def test_why_not_answers_per_cluster_and_reads_only(env: Env) -> None:
    events = len(env.get("/v1/events", params={"limit": 10000}).json())
    resp = env.get("/v1/why-not", "reader", params={"flavor": "c3.large"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["fits_now"] is True
    assert all(a["fits_now"] for a in body["clusters"].values())
    assert len(env.get("/v1/events", params={"limit": 10000}).json()) == events


def test_why_not_eviction_carried_out_lets_the_placement_in(env: Env) -> None:
    while True:  # fill az1's GPU hosts with preemptible GPU guests
        resp = env.post(
            "/v1/placements",
            {"flavor": "gn3.4xlarge", "cluster": "az1", "business_type": "preemptible"},
        )
        if resp.status_code != 201:
            break
    big = env.get("/v1/why-not", "reader", params={"flavor": "gn3.4xlarge", "cluster": "az1"})
    assert big.status_code == 200, big.text
    answer = big.json()["clusters"]["az1"]
    assert answer["fits_now"] is False
    (evict,) = [w for w in answer["options"] if w["kind"] == "evict"]
    assert evict["fits"]
    assert evict["price"] == 16.0  # one gn3.4xlarge's vCPUs
    for iid in evict["evictions"]:  # the operator evicts them ...
        assert env.delete(f"/v1/instances/{iid}").status_code == 204
    placed = env.post(
        "/v1/placements",
        {"flavor": "gn3.4xlarge", "cluster": "az1", "business_type": "preemptible"},
    )
    assert placed.status_code == 201, placed.text  # ... and it fits, without evicting anything
    assert placed.json()["evicted"] == []


def test_why_not_names_bad_fields_and_needs_a_reader(env: Env) -> None:
    bad = env.get("/v1/why-not", params={"flavor": "nope"})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "flavor"
    bad = env.get("/v1/why-not", params={"flavor": "c3.large", "cluster": "nowhere"})
    assert bad.json()["error"]["field"] == "cluster"
    assert env.get("/v1/why-not", params={"flavor": "c3.large", "max_moves": 0}).status_code == 422
    assert env.get("/v1/why-not", "alpha", params={"flavor": "c3.large"}).status_code == 403
