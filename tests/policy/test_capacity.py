"""The capacity report equals the core's `FilterScheduler.capacity` restricted to each pool,
before and after placements and evictions, and its groupings add up."""

from __future__ import annotations

import numpy as np
import pytest

from berth.policy.demo import DEMO_NOW, POLICY_FILE, TOPOLOGY_FILE, shipped_path
from berth.policy.errors import MultiCloudInputError
from berth.policy.loader import load_policy, load_topology
from berth.policy.outcome import Placement, ScheduleRequest
from berth.policy.pipeline import PolicyEngine


@pytest.fixture(scope="module")
def demo() -> PolicyEngine:
    return PolicyEngine(
        load_policy(shipped_path(POLICY_FILE)), load_topology(shipped_path(TOPOLOGY_FILE))
    )


def expected(engine: PolicyEngine, now: float) -> dict[tuple[str, str], np.ndarray]:
    """Per (cluster, concrete flavor): the core's capacity on the flavor's pool, 0 if disabled."""
    out = {}
    for name, cluster in engine.topology.clusters.items():
        for cand in engine.catalogue.concrete.values():
            counts = engine.scheduler.capacity(cluster.table, cand.flavor, now)
            pool = cluster.pool_mask(tuple(engine.catalogue.pools[cand.pool].traits))
            counts = np.where(pool, counts, 0) if cluster.enabled else np.zeros_like(counts)
            out[(name, cand.flavor)] = counts
    return out


def check(engine: PolicyEngine, now: float) -> None:
    report = engine.capacity(now)
    want = expected(engine, now)
    for c in report.clusters:
        for i, e in enumerate(report.entries):
            assert np.array_equal(c.counts[i], want[(c.cluster, e.flavor)]), (c.cluster, e.flavor)


def test_report_matches_core_capacity_through_changes(demo):
    engine = demo
    check(engine, DEMO_NOW)
    # placements, evictions and deletions change some hosts; the caches must follow exactly
    requests = [
        ScheduleRequest(region="beijing", flavor="v.c3.xlarge", count=3),
        ScheduleRequest(region="shanghai", flavor="v.m3.2xlarge", business="preemptible"),
        ScheduleRequest(region="guangzhou", flavor="v.g3.4xlarge", count=2),
        ScheduleRequest(region="bj-yz", flavor="v.m3.4xlarge", count=4),
    ]
    for n, request in enumerate(requests):
        outcome = engine.schedule(request.model_copy(update={"seed": n}), DEMO_NOW)
        assert isinstance(outcome, Placement)
        check(engine, DEMO_NOW)
    victim = sorted(engine.topology.clusters["sh-jd-c1"].table.allocations)[0]
    engine.delete(victim)
    check(engine, DEMO_NOW)
    # time passes: heartbeats go stale, hosts drop out of the counts
    check(engine, DEMO_NOW + 3600)


def test_groupings_add_up(demo):
    report = demo.capacity(DEMO_NOW)
    by_cluster = report.by_cluster()
    by_idc = report.by_idc()
    by_region = report.by_region()
    by_pool = report.by_pool()
    by_host = report.by_host(nonzero=False)
    by_base = report.by_base()
    for e in report.entries:
        total = sum(v[e.flavor] for v in by_cluster.values())
        assert total == sum(v[e.flavor] for v in by_idc.values())
        assert total == sum(v[e.flavor] for v in by_region.values())
        assert total == sum(v.get(e.flavor, 0) for v in by_pool.values())
        assert total == sum(v[e.flavor] for v in by_host.values())
    for base, entry in zip(report.entry_bases, report.entries, strict=True):
        assert by_base[base][entry.variant] == sum(v[entry.flavor] for v in by_cluster.values())
    assert set(by_idc) == set(demo.topology.idcs)
    data = report.to_dict("idc")
    assert data["by"] == "idc"


def test_report_for_some_flavors_and_unknown_flavor(demo):
    report = demo.capacity(DEMO_NOW, ["v.c3.large"])
    assert {e.variant for e in report.entries} == {
        "dpdk-numa1",
        "dpdk-numa2",
        "numa1",
        "numa2",
        "numa2-flex",
    }
    with pytest.raises(MultiCloudInputError):
        demo.capacity(DEMO_NOW, ["v.nope"])
