"""`POST /v1/placements?why=true` and `GET /v1/why-not` through the real app (docs/why.md,
docs/why-not.md)."""

from __future__ import annotations

from typing import Any

from berth.core.why import Part, Scale, fold
from berth.service.placing.why_record import STORED_INSTANCES
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


def assert_kept(kept: dict[str, Any], answer: list[dict[str, Any]]) -> None:
    """The outcome row's compact why says what the answer's full why says, float for float,
    and its stored numbers still fold back to each candidate's score."""
    assert kept["instances_total"] == len(answer)
    assert len(kept["instances"]) == min(len(answer), STORED_INSTANCES)
    for inst, full in zip(kept["instances"], answer, strict=False):
        assert kept["weighers"] == [sc["weigher"] for sc in full["scales"]]
        assert kept["multipliers"] == [sc["multiplier"] for sc in full["scales"]]
        assert inst["constant"] == [sc["constant"] for sc in full["scales"]]
        assert (inst["id"], inst["host"]) == (full["instance_id"], full["ranked"][0]["host"])
        for key in ("candidates", "draw", "tied", "seed", "margin", "decided_by", "needed"):
            assert inst[key] == full[key], key
        assert inst["summary"] == full["summary"]
        if full["decided_by"] is not None:
            assert inst["share"] == full["deltas"][full["decided_by"]]
        scales = [Scale(**sc) for sc in full["scales"]]
        for cand, whole in zip(inst["ranked"], full["ranked"], strict=True):
            assert (cand["host"], cand["score"]) == (whole["host"], whole["score"])
            assert cand["raw"] == [p["raw"] for p in whole["parts"]]
            assert cand["norm"] == [p["normalised"] for p in whole["parts"]]
            assert cand["part"] == [p["contribution"] for p in whole["parts"]]
            parts = [
                Part(w, r, n, m, c)
                for w, r, n, m, c in zip(
                    kept["weighers"],
                    cand["raw"],
                    cand["norm"],
                    kept["multipliers"],
                    cand["part"],
                    strict=True,
                )
            ]
            assert fold(parts, scales) == cand["score"]


def test_an_explained_placement_keeps_its_why_in_the_outcome_log(env: Env) -> None:
    """Asked: the answer's why, compacted, is in the outcome row; not asked: nothing is kept;
    with `why_all` every placement's row keeps one (default top 3) and the answer has none."""
    asked = env.post(
        "/v1/placements",
        {"flavor": "c3.4xlarge.numa1", "count": 2, "seed": 7},
        "alpha",
        params={"why": "true", "why_top": 4},
    )
    assert asked.status_code == 201, asked.text
    [row] = env.store.recent_outcomes(1)
    assert row.why is not None
    assert row.why["top"] == 4
    assert_kept(row.why, asked.json()["why"])
    assert env.post("/v1/placements", {"flavor": "c3.large"}, "alpha").status_code == 201
    assert env.store.recent_outcomes(1)[0].why is None
    env.replica.config.why_all = True  # `berth serve --why-all`
    try:
        plain = env.post("/v1/placements", {"flavor": "c3.large", "seed": 3}, "alpha")
    finally:
        env.replica.config.why_all = False
    assert plain.status_code == 201
    assert "why" not in plain.json()
    kept = env.store.recent_outcomes(1)[0].why
    assert kept is not None
    assert kept["top"] == 3
    [inst] = kept["instances"]
    assert inst["host"] == plain.json()["instances"][0]["host"]
    assert len(inst["ranked"]) == 3
    many = env.post(
        "/v1/placements", {"flavor": "c3.large", "count": 12}, "alpha", params={"why": "true"}
    )
    assert many.status_code == 201, many.text
    kept = env.store.recent_outcomes(1)[0].why
    assert kept is not None
    assert len(kept["instances"]) == STORED_INSTANCES
    assert_kept(kept, many.json()["why"])


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
