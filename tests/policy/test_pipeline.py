"""The pipeline, rule by rule: pre-check, deployment sets, candidates, limits, placement,
preemption, commit, topology changes, accounting."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.policy.errors import MultiCloudInputError, PolicyConflictError
from berth.policy.model import Business, ClusterSpec
from berth.policy.outcome import Failure, Placement, ScheduleRequest
from berth.policy.pipeline import PolicyEngine
from tests.policy.fixtures import NOW, POLICY, cluster, engine, host, inst, topology
from tests.policy.helpers import same, snapshot


def state(e: PolicyEngine) -> dict[str, Any]:
    """Every piece of engine state a request may touch."""
    out: dict[str, Any] = {}
    for name, c in e.topology.clusters.items():
        out[f"table:{name}"] = snapshot(c.table)
        out[f"meta:{name}"] = dict(c.meta)
        out[f"pre:{name}"] = {h: set(ids) for h, ids in c.preemptible_by_host.items()}
        out[f"net:{name}"] = dict(c.networks)
        out[f"groups:{name}"] = sorted(c.table.groups)
    out["sets"] = {n: dict(s.members) for n, s in e.topology.sets.items()}
    out["seq"] = e._seq
    return out


def equal_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(same(v, b[k]) if k.startswith("table:") else v == b[k] for k, v in a.items())


def req(**kw: Any) -> ScheduleRequest:
    kw.setdefault("region", "r1")
    kw.setdefault("flavor", "v.c.small")
    return ScheduleRequest(**kw)


def placed(outcome: Placement | Failure) -> Placement:
    assert isinstance(outcome, Placement), getattr(outcome, "message", outcome)
    return outcome


def failed(outcome: Placement | Failure) -> Failure:
    assert isinstance(outcome, Failure), outcome
    return outcome


def two_pools() -> PolicyEngine:
    return engine(
        topology(
            [cluster("a1", [host("s1"), host("s2"), host("d1", "dpdk")])],
            [cluster("b1", [host("bs1"), host("bd1", "dpdk")])],
        )
    )


# ---------------------------------------------------------------------------- pre-check
@pytest.mark.parametrize(
    ("request_kw", "code", "rejected"),
    [
        ({"image": "windows"}, "image_missing", {"a1", "b1"}),
        ({"image": "ubuntu", "region": "idc-b"}, "image_missing", {"b1"}),
        ({"flavor": "v.gpu", "region": "idc-b"}, "flavor_not_offered", {"b1"}),
        ({"network": "nope"}, "network_missing", {"a1", "b1"}),
        ({"count": 101}, "insufficient_ips", {"a1", "b1"}),
    ],
)
def test_precheck_rejects_each_cluster_with_its_reason(request_kw, code, rejected):
    e = two_pools()
    f = failed(e.decide(req(**request_kw), NOW))
    assert f.step == "precheck"
    assert f.code == code
    assert {r.cluster for r in f.rejections} == rejected
    assert all(r.code == code for r in f.rejections)


def test_precheck_keeps_passing_clusters_and_records_the_rest():
    e = two_pools()
    p = placed(e.decide(req(image="ubuntu"), NOW))  # idc-b lacks ubuntu
    assert p.idc == "idc-a"
    assert [(r.cluster, r.code) for r in p.rejections] == [("b1", "image_missing")]


def test_disabled_cluster_and_ip_shortage_are_reasons():
    e = engine(
        topology(
            [
                cluster("off", [host("h1")], enabled=False),
                cluster("few", [host("h2")], ips=1),
            ]
        )
    )
    f = failed(e.decide(req(count=2), NOW))
    assert f.code == "no_candidate_cluster"
    assert {(r.cluster, r.code) for r in f.rejections} == {
        ("off", "cluster_disabled"),
        ("few", "insufficient_ips"),
    }
    assert "0/2 clusters" in f.message


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"region": "mars"}, "--region"),
        ({"flavor": "v.nope"}, "--flavor"),
    ],
)
def test_bad_input_raises_policy_error_naming_the_option(kw, field):
    with pytest.raises(MultiCloudInputError, match=field):
        two_pools().decide(req(**kw), NOW)


# ---------------------------------------------------------------------------- candidates
@pytest.mark.parametrize(
    ("business", "user", "expected"),
    [
        ("on-demand", "default", ["dpdk-numa1", "dpdk-numa2", "numa1", "numa2"]),
        ("auto-scaling", "default", ["numa1"]),
        ("preemptible", "default", ["numa2"]),
        ("preemptible", "bigdata", ["flex", "numa2"]),
        ("on-demand", "bigdata", ["dpdk-numa1", "dpdk-numa2", "numa1", "numa2"]),
        ("on-demand", "bank", ["numa1", "numa2"]),
        ("preemptible", "bank", ["numa1", "numa2"]),
    ],
)
def test_candidate_order_per_business_type_and_user(business, user, expected):
    e = two_pools()
    cands = e.catalogue.candidates("v.c.small", Business(business), user)
    assert [c.variant for c in cands.items] == expected
    assert cands.may_preempt == (business == "on-demand")
    if user == "bank":
        assert {c.pool for c in cands.items} == {"enterprise"}


def test_special_user_may_preempt_override_and_preemptible_never_evicts():
    e = two_pools()
    assert e.catalogue.candidates("v.c.small", Business.AUTO_SCALING, "game").may_preempt
    assert not e.catalogue.candidates("v.c.small", Business.PREEMPTIBLE, "game").may_preempt


def test_variants_not_for_the_family_are_skipped():
    e = two_pools()
    got = [c.variant for c in e.catalogue.candidates("v.gpu", Business.ON_DEMAND, "x").items]
    assert got == ["numa1", "numa2"]


def test_on_demand_tries_variants_in_order_falling_through_full_pools():
    # dpdk host takes exactly one 4-CPU single-NUMA guest per cell, two in all
    e = engine(topology([cluster("a1", [host("s1"), host("d1", "dpdk", pcpus=4)])]))
    seen = []
    for _ in range(4):
        p = placed(e.schedule(req(flavor="v.c.large"), NOW))
        seen.append((p.variant, p.pool))
    assert seen == [
        ("dpdk-numa1", "dpdk"),
        ("dpdk-numa1", "dpdk"),
        ("numa1", "shared"),
        ("numa1", "shared"),
    ]


def test_dpdk_dual_numa_before_normal_when_single_cell_room_is_gone():
    # each dpdk cell has 3 pinned CPUs: no cell takes 4, two cells take 2+2
    e = engine(topology([cluster("a1", [host("s1"), host("d1", "dpdk", pcpus=3)])]))
    p = placed(e.decide(req(flavor="v.c.large"), NOW))
    assert (p.variant, p.pool) == ("dpdk-numa2", "dpdk")
    assert [a.variant for a in p.attempts] == ["dpdk-numa1", "dpdk-numa2"]
    assert p.attempts[0].outcome == "insufficient_capacity"


def test_auto_scaling_gets_single_numa_only():
    # 3 CPUs per cell: only a two-cell guest of 4 fits; auto-scaling may not use it
    e = engine(topology([cluster("a1", [host("s1", pcpus=3)])]))
    f = failed(e.decide(req(flavor="v.c.large", business="auto-scaling"), NOW))
    assert f.step == "placement"
    assert f.candidates is not None
    assert [c.variant for c in f.candidates.items] == ["numa1"]
    assert f.attempts[0].diagnosis is not None
    assert "NUMA cell" in str(f.attempts[0].diagnosis)
    p = placed(e.decide(req(flavor="v.c.large", business="on-demand"), NOW))
    assert p.variant == "numa2"


def test_preemptible_gets_dual_numa_only():
    e = engine(topology([cluster("a1", [host("s1", pcpus=8, cells=1)])]))  # one-cell host
    f = failed(e.decide(req(business="preemptible"), NOW))
    assert [a.variant for a in f.attempts] == ["numa2"]
    assert placed(e.decide(req(business="auto-scaling"), NOW)).variant == "numa1"


# ---------------------------------------------------------------------------- preemptible limit
def test_preemptible_limit_per_idc():
    hosts = [host("bs1"), host("bs2")]
    e = engine(topology([cluster("a1", [host("s1")])], [cluster("b1", hosts)]))
    region = "idc-b"  # limit 2
    placed(e.schedule(req(region=region, business="preemptible"), NOW))
    f = failed(e.decide(req(region=region, business="preemptible", count=2), NOW))
    assert f.code == "preemptible_limit"
    assert "would exceed" in f.rejections[0].message
    placed(e.schedule(req(region=region, business="preemptible"), NOW))
    f = failed(e.decide(req(region=region, business="preemptible"), NOW))
    assert (f.step, f.code) == ("preemptible_limit", "preemptible_limit")
    assert "runs 2 preemptible instances, limit 2" in f.rejections[0].message
    # other business types are not limited, other IDCs have their own limit
    placed(e.decide(req(region=region, business="on-demand"), NOW))
    p = placed(e.decide(req(region="r1", business="preemptible"), NOW))
    assert p.idc == "idc-a"


# ---------------------------------------------------------------------------- deployment sets
def test_deployment_set_members_spread_and_size_limit():
    e = engine(topology([cluster("a1", [host(f"s{i}") for i in range(6)])]))
    p = placed(e.schedule(req(count=3, deployment_set="web"), NOW))
    assert len(set(p.hosts)) == 3
    p2 = placed(e.schedule(req(count=1, deployment_set="web"), NOW))
    assert p2.hosts[0] not in p.hosts
    f = failed(e.decide(req(count=1, deployment_set="web"), NOW))  # max_size 4
    assert (f.step, f.code) == ("deployment_set", "deployment_set_full")
    assert "web" in e.topology.sets
    assert len(e.topology.sets["web"].members) == 4


def test_deployment_set_fails_when_not_enough_distinct_hosts():
    e = engine(topology([cluster("a1", [host("s1"), host("s2")])]))
    f = failed(e.decide(req(count=3, deployment_set="web"), NOW))
    assert f.code == "no_capacity"
    assert all(a.capacity <= 2 for a in f.attempts)


def test_rack_scope_spreads_by_rack_across_clusters():
    sets = [{"name": "db", "max_size": 10, "scope": "rack"}]
    a = cluster("a1", [host("s1", rack="r1"), host("s2", rack="r1"), host("s3", rack="r2")])
    b = cluster("a2", [host("t1", rack="r2"), host("t2", rack="r3")])
    e = engine(topology([a, b], sets=sets))
    racks = []
    for _ in range(3):
        p = placed(e.schedule(req(deployment_set="db"), NOW))
        t = e.topology.clusters[p.cluster].table
        racks.append(t.racks.words[t.rack[t.index[p.hosts[0]]]])
    assert sorted(racks) == ["r1", "r2", "r3"]
    f = failed(e.decide(req(deployment_set="db"), NOW))
    assert f.code == "no_capacity"


def test_deployment_set_commit_rechecks_concurrent_decisions():
    e = engine(topology([cluster("a1", [host("s1"), host("s2")])]))
    first = placed(e.decide(req(deployment_set="web", instance_ids=("x1",)), NOW))
    second = placed(e.decide(req(deployment_set="web", instance_ids=("x2",)), NOW))
    assert first.hosts == second.hosts  # same snapshot, same choice
    e.commit(first, NOW)
    before = state(e)
    with pytest.raises(PolicyConflictError):
        e.commit(second, NOW)
    assert equal_states(before, state(e))


@settings(max_examples=25)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["web", "db", "api"]),
            st.integers(1, 3),
            st.sampled_from(["v.c.small", "v.c.large"]),
            st.sampled_from(list(Business)),
            st.booleans(),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_deployment_set_never_two_members_on_one_host(ops):
    sets = [
        {"name": "web", "max_size": 5},
        {"name": "db", "max_size": 3, "scope": "rack"},
        {"name": "api", "max_size": 6},
    ]
    racks = ["r1", "r1", "r2", "r3", "r3", "r4"]
    hosts_a = [host(f"a{i}", rack=racks[i], pcpus=6) for i in range(6)]
    hosts_b = [host(f"b{i}", rack=racks[i], pcpus=6) for i in range(4)]
    e = engine(topology([cluster("c1", hosts_a), cluster("c2", hosts_b)], sets=sets))
    for n, (ds, count, flavor, business, delete) in enumerate(ops):
        e.schedule(
            req(flavor=flavor, count=count, business=business, deployment_set=ds, seed=n), NOW
        )
        if delete and e.topology.sets[ds].members:
            e.delete(sorted(e.topology.sets[ds].members)[0])
    for name, ds in e.topology.sets.items():
        assert len(ds.members) <= ds.max_size
        where = []
        for iid, cname in ds.members.items():
            t = e.topology.clusters[cname].table
            alloc = t.allocations[iid]
            where.append((cname, alloc.host, t.racks.words[t.rack[t.index[alloc.host]]]))
        hosts = [h for _, h, _ in where]
        assert len(hosts) == len(set(hosts)), f"{name}: two members on one host"
        if ds.scope == "rack":
            rack_names = [r for _, _, r in where]
            assert len(rack_names) == len(set(rack_names)), f"{name}: two members in one rack"


# ---------------------------------------------------------------------------- cluster choice
@pytest.mark.parametrize(
    ("choice", "expected"),
    [("most-capacity", "big"), ("pack", "small"), ("order", "small")],
)
def test_cluster_choice_policy(choice, expected):
    topo = topology(
        [
            cluster("small", [host("s1")]),
            cluster("big", [host("b1"), host("b2"), host("b3")]),
        ]
    )
    e = engine(topo, placement={"cluster_choice": choice, "profile": "pack"})
    assert placed(e.decide(req(business="auto-scaling"), NOW)).cluster == expected


# ---------------------------------------------------------------------------- preemption
def crowded(extra: list[dict[str, Any]] | None = None) -> PolicyEngine:
    """One shared host, full: 2 preemptible 4-CPU guests per cell, created at t=10 and t=20."""
    instances = [
        inst("p-old", "s1", "v.c.large.n1", "preemptible", created=10.0),
        inst("p-new", "s1", "v.c.large.n1", "preemptible", created=20.0),
        inst("p-c1a", "s1", "v.c.large.n1", "preemptible", created=5.0),
        inst("od", "s1", "v.c.large.n1", "on-demand", created=1.0),
        *(extra or []),
    ]
    return engine(topology([cluster("a1", [host("s1")], instances)]))


def test_on_demand_evicts_the_least_damage_set_and_commit_carries_it_out():
    e = crowded()
    p = placed(e.decide(req(flavor="v.c.large"), NOW))
    assert p.plan is not None
    assert len(p.evictions) == 1
    # every single victim frees a 4-CPU cell slot; the youngest goes
    assert p.evictions == ("p-new",)
    done = e.commit(p, NOW)
    assert [v.instance_id for v in done.evicted] == ["p-new"]
    table = e.topology.clusters["a1"].table
    assert "p-new" not in table.allocations
    assert set(done.instance_ids) <= set(table.allocations)
    assert "p-new" not in e.topology.clusters["a1"].meta
    assert e.evictions[-1].instance_id == "p-new"


def test_preemptible_request_never_evicts():
    e = crowded()
    before = state(e)
    f = failed(e.decide(req(flavor="v.c.large", business="preemptible"), NOW))
    assert f.step == "placement"
    assert all(a.outcome != "preemption_plan" for a in f.attempts)
    assert equal_states(before, state(e))


def test_only_preemptible_instances_are_victims():
    instances = [inst(f"od{i}", "s1", "v.c.large.n1", "on-demand") for i in range(4)]
    e = engine(topology([cluster("a1", [host("s1")], instances)]))
    f = failed(e.decide(req(flavor="v.c.large"), NOW))
    assert f.step == "preemption"
    assert "no eviction" in f.message


def test_auto_scaling_evicts_only_for_a_user_allowed_to():
    e = crowded()
    failed(e.decide(req(flavor="v.c.large", business="auto-scaling"), NOW))
    p = placed(e.decide(req(flavor="v.c.large", business="auto-scaling", user="game"), NOW))
    assert p.evictions


def test_prefers_a_host_needing_no_eviction():
    e = engine(
        topology(
            [
                cluster(
                    "a1",
                    [host("s1"), host("s2", pcpus=4, cells=1)],
                    [inst(f"p{i}", "s1", "v.c.large.n1", "preemptible") for i in range(4)],
                )
            ]
        )
    )
    p = placed(e.decide(req(flavor="v.c.large"), NOW))
    assert p.hosts == ["s2"]
    assert p.evictions == ()


# ---------------------------------------------------------------------------- failures
@pytest.mark.parametrize(
    "kw",
    [
        {"flavor": "v.c.huge", "count": 3},
        {"flavor": "v.c.huge", "business": "preemptible"},
        {"deployment_set": "new-set", "count": 5},
        {"image": "windows"},
        {"flavor": "v.c.large", "business": "auto-scaling"},
    ],
)
def test_a_failed_request_changes_nothing(kw):
    e = crowded()
    before = state(e)
    outcome = e.schedule(req(**kw), NOW)
    assert isinstance(outcome, Failure)
    assert equal_states(before, state(e))
    assert "new-set" not in e.topology.sets
    assert all("new-set" not in c.table.groups for c in e.topology.clusters.values())


def test_decide_changes_nothing_even_when_it_succeeds():
    e = crowded()
    before = state(e)
    placed(e.decide(req(flavor="v.c.large", deployment_set="fresh"), NOW))
    assert equal_states(before, state(e))


def test_stale_placement_is_refused_and_changes_nothing():
    e = crowded()
    p = placed(e.decide(req(flavor="v.c.large"), NOW))
    e.delete("p-old")  # the host changed since the decision
    before = state(e)
    with pytest.raises(PolicyConflictError):
        e.commit(p, NOW)
    assert equal_states(before, state(e))


# ---------------------------------------------------------------------------- topology
def test_clusters_join_and_leave_without_touching_the_others():
    e = two_pools()
    placed(e.schedule(req(), NOW))
    others = {n: snapshot(c.table) for n, c in e.topology.clusters.items()}
    spec = ClusterSpec.model_validate(cluster("a9", [host("n1"), host("n2")]))
    e.add_cluster("idc-a", spec)
    assert all(same(s, snapshot(e.topology.clusters[n].table)) for n, s in others.items())
    e.remove_cluster("b1")
    assert "b1" not in e.topology.idcs["idc-b"].clusters
    assert all(
        same(s, snapshot(e.topology.clusters[n].table)) for n, s in others.items() if n != "b1"
    )
    with pytest.raises(MultiCloudInputError):
        e.add_cluster("idc-a", spec)


def test_pool_membership_follows_traits():
    e = two_pools()
    c = e.topology.clusters["a1"]
    assert [c.table.names[i] for i, m in enumerate(c.pool_mask(("CUSTOM_POOL_DPDK",))) if m] == [
        "d1"
    ]
    assert not c.pool_mask(("CUSTOM_POOL_GPU",)).any()


# ---------------------------------------------------------------------------- accounting
def test_accounting_per_day_business_and_reason():
    e = engine(topology([cluster("a1", [host("s1", pcpus=4)])]))
    day2 = NOW + 86_400
    e.schedule(req(), NOW)
    e.schedule(req(business="preemptible"), NOW)
    e.schedule(req(flavor="v.c.huge"), NOW)
    e.schedule(req(image="windows"), day2)
    acc = e.accounting.to_dict()
    days = list(acc["days"])
    assert len(days) == 2
    first = acc["days"][days[0]]
    assert (first["requests"], first["successes"], first["failures"]) == (3, 2, 1)
    assert first["failures_by_reason"] == {"no_capacity": 1}
    assert first["requests_by_business"] == {"on-demand": 2, "preemptible": 1}
    assert acc["days"][days[1]]["failures_by_reason"] == {"image_missing": 1}
    assert acc["total"]["success_rate"] == 0.5


# ---------------------------------------------------------------------------- elastic pools
def test_elastic_vms_are_evicted_by_on_demand_never_evict_and_escape_the_preemptible_limit():
    """The elastic pools' worker VMs are their own business type: an on-demand request evicts
    them as it would preemptible ones (their loop then drains them), an elastic request never
    evicts, and they do not count against an IDC's preemptible limit."""
    instances = [
        inst(f"e{i}", "s1", "v.c.large.n1", "elastic", created=10.0 + i) for i in range(3)
    ] + [inst("od", "s1", "v.c.large.n1", "on-demand", created=1.0)]
    e = engine(topology([cluster("a1", [host("s1")], instances)]))
    assert e.topology.clusters["a1"].is_preemptible(
        e.topology.clusters["a1"].table.allocations["e0"]
    )
    f = failed(e.decide(req(flavor="v.c.large", business="elastic"), NOW))
    assert all(a.outcome != "preemption_plan" for a in f.attempts)
    p = placed(e.decide(req(flavor="v.c.large"), NOW))
    assert p.evictions == ("e2",)  # the youngest
    done = e.commit(p, NOW)
    assert [v.instance_id for v in done.evicted] == ["e2"]
    # the preemptible limit (idc-b: 2) counts preemptible instances only
    hosts = [host("bs1"), host("bs2")]
    e = engine(topology([cluster("a1", [host("s1")])], [cluster("b1", hosts)]))
    for _ in range(3):
        placed(e.schedule(req(region="idc-b", business="elastic"), NOW))
    assert e.topology.preemptible_count("idc-b") == 0
    placed(e.schedule(req(region="idc-b", business="preemptible", count=2), NOW))
    assert e.topology.preemptible_count("idc-b") == 2


def test_the_elastic_rule_is_optional_and_never_preempts():
    e = two_pools()
    cands = e.catalogue.candidates("v.c.small", Business.ELASTIC, "default")
    pre = e.catalogue.candidates("v.c.small", Business.PREEMPTIBLE, "default")
    assert [c.variant for c in cands.items] == [c.variant for c in pre.items]
    assert not cands.may_preempt
    with pytest.raises(ValueError, match=r"business\.elastic\.may_preempt"):
        engine(
            topology([cluster("a1", [host("s1")])]),
            business={
                **POLICY["business"],
                "elastic": {"variants": ["numa2"], "may_preempt": True},
            },
        )
