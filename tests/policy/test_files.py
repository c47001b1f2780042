"""Policy and topology files: validation errors name the field; the shipped demo matches its
generator and has the promised shape; the rack anti-affinity core plugin."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from berth.core.filters.base import Context
from berth.core.filters.rack_anti_affinity import RackAntiAffinityFilter, RackAntiAffinityParams
from berth.core.model import ServerGroup
from berth.core.registry import FILTERS
from berth.core.request import RequestSpec
from berth.policy.catalogue import Catalogue
from berth.policy.demo import (
    POLICY_FILE,
    TOPOLOGY_FILE,
    build_demo_policy,
    demo_policy_text,
    demo_topology_text,
    shipped,
    shipped_path,
)
from berth.policy.errors import MultiCloudInputError
from berth.policy.loader import PolicyFileError, load_policy, load_topology, parse
from berth.policy.model import Business, Family, Policy, TopologySpec
from tests.policy.fixtures import POLICY, cluster, host, inst, topology
from tests.policy.helpers import NOW, flavor, table
from tests.policy.helpers import host as core_host


def _with(path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(POLICY)
    node: Any = raw
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_with("business.on-demand.variants", ["numa1", "nope"]), "business.on-demand.variants[1]"),
        (_with("families.0.pool", "nowhere"), "families[0].pool: unknown pool 'nowhere'"),
        (_with("flavors.0.vcpus", 0), "flavors[0].vcpus"),
        (_with("variants.2.pool", "x"), "variants[2].pool: unknown pool 'x'"),
        (_with("users.0.variants", ["zzz"]), "users[0].variants[0]"),
        (_with("pools.1.traits", []), "pools[1].traits"),
        (_with("placement.cluster_choice", "random"), "placement.cluster_choice"),
        (_with("business.preemptible.may_preempt", True), "preemptible requests never evict"),
        (_with("preemptible_limits.default", -1), "preemptible_limits.default"),
        (_with("variants.3.suffix", ".n1"), "duplicate name '.n1'"),
    ],
)
def test_policy_errors_name_the_field(raw, message):
    with pytest.raises(PolicyFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(Policy, raw, "policy.yaml")


def test_missing_business_type_is_named():
    raw = copy.deepcopy(POLICY)
    del raw["business"]["auto-scaling"]
    with pytest.raises(PolicyFileError, match="missing rule for 'auto-scaling'"):
        parse(Policy, raw, "p")


def test_variant_that_cannot_apply_is_named():
    raw = copy.deepcopy(POLICY)
    raw["flavors"].append({"name": "v.odd", "family": "compute", "vcpus": 3, "memory_mb": 3072})
    with pytest.raises(MultiCloudInputError, match=r"\(v\.odd\) x variants\[1\] \(dpdk-numa2\)"):
        Catalogue(Policy.model_validate(raw))


@pytest.mark.parametrize(
    ("topo", "message"),
    [
        (
            topology([cluster("a", [host("h1")], [inst("i", "h9", "v.c.small")])]),
            r"clusters\[0\]\.instances\[0\]\.host: 'h9' is not a host of cluster 'a'",
        ),
        (
            topology([cluster("a", [host("h1")]), cluster("b", [host("h1")])]),
            "host 'h1' appears in clusters 'a' and 'b'",
        ),
        (
            topology([cluster("a", [host("h1")], [inst("i", "h1", "v.c.small", ds="zz")])]),
            "unknown set 'zz'",
        ),
        ({"regions": []}, "regions"),
    ],
)
def test_topology_errors_name_the_field(topo, message):
    with pytest.raises(PolicyFileError, match=message):
        parse(TopologySpec, topo, "topology.yaml")


def test_loader_reports_unreadable_and_invalid_files(tmp_path: Path):
    with pytest.raises(PolicyFileError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [\n", encoding="utf-8")
    with pytest.raises(PolicyFileError, match="not valid YAML"):
        load_policy(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(PolicyFileError, match="expected a mapping"):
        load_topology(listy)
    js = tmp_path / "p.json"
    js.write_text('{"pools": 3}', encoding="utf-8")
    with pytest.raises(PolicyFileError, match=r"p\.json: pools"):
        load_policy(js)


# ---------------------------------------------------------------------------- demo
def test_shipped_demo_policy_matches_the_generator():
    assert shipped(POLICY_FILE) == demo_policy_text()


def test_shipped_demo_topology_matches_the_generator():
    assert shipped(TOPOLOGY_FILE) == demo_topology_text()


def test_demo_has_the_promised_shape():
    policy = load_policy(shipped_path(POLICY_FILE))
    topo = load_topology(shipped_path(TOPOLOGY_FILE))
    assert len(topo.regions) >= 3
    assert all(sum(len(i.clusters) for i in r.idcs) >= 2 for r in topo.regions)
    assert {f.family for f in policy.flavors} == set(Family)
    assert {p.name for p in policy.pools} >= {"shared", "enterprise", "dpdk", "gpu"}
    assert len(policy.users) >= 3
    businesses = {
        x.business for r in topo.regions for i in r.idcs for c in i.clusters for x in c.instances
    }
    assert businesses == set(Business) - {Business.ELASTIC}  # elastic VMs: the elastic loop's
    assert yaml.safe_load(shipped(POLICY_FILE))["business"]["on-demand"]["variants"] == [
        "dpdk-numa1",
        "dpdk-numa2",
        "numa1",
        "numa2",
    ]
    cat = Catalogue(build_demo_policy())
    assert cat.concrete[("v.c3.large", "numa2")].flavor == "v.c3.large"  # the seed's naming


# ---------------------------------------------------------------------------- rack filter
def test_rack_anti_affinity_filter_is_registered_and_spreads_by_rack():
    assert FILTERS["rack_anti_affinity"] is RackAntiAffinityFilter
    t = table(
        [
            core_host("a", rack="r1"),
            core_host("b", rack="r1"),
            core_host("c", rack="r2"),
            core_host("d"),  # no rack: its own
        ],
        [flavor("f", 1, 512)],
        groups=[
            ServerGroup(id="g", policy="anti-affinity"),
            ServerGroup(id="aff", policy="affinity"),
        ],
    )
    t.claim("m1", "a", "f", server_group="g")

    def passing(params: RackAntiAffinityParams, group: str | None) -> list[str]:
        request = RequestSpec(flavor="f", server_group=group)
        ctx = Context(t, request, t.demand("f"), NOW)
        mask = RackAntiAffinityFilter(params).mask(ctx)
        return [t.names[i] for i in np.flatnonzero(mask)]

    everyone = ["a", "b", "c", "d"]
    assert passing(RackAntiAffinityParams(groups=["g"]), "g") == ["c", "d"]
    assert passing(RackAntiAffinityParams(all_groups=True), "g") == ["c", "d"]
    assert passing(RackAntiAffinityParams(), "g") == everyone  # group not listed
    assert passing(RackAntiAffinityParams(all_groups=True), None) == everyone
    assert passing(RackAntiAffinityParams(all_groups=True), "aff") == everyone
