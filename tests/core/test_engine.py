"""The scheduling pipeline: select_destinations, commit, diagnosis, tie-breaking, chance driver."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.config import SchedulerConfig, WeigherConfig, profile
from berth.core.engine import ChanceScheduler, FilterScheduler, commit
from berth.core.errors import BerthError, ClaimError, SpecError, StaleGenerationError
from berth.core.explain import NoValidHost
from berth.core.resources import C_PCPU, H_MEM
from berth.core.table import HostTable
from tests.builders import (
    NOW,
    assert_unchanged,
    flavor,
    group,
    host,
    instance,
    place,
    request,
    scheduler,
    snapshot,
    table_of,
)

# ---------------------------------------------------------------------------- all or nothing


def test_multi_instance_request_is_all_or_nothing():
    hosts = [host("a", pcpus=2, mem=4096), host("b", pcpus=2, mem=4096)]
    table = table_of(hosts, [flavor("p2", vcpus=2, mem=1024, pinned=True)])
    sched = scheduler()
    before = snapshot(table)
    with pytest.raises(NoValidHost) as err:
        sched.select_destinations(table, request("p2", num_instances=3), NOW)
    assert str(err.value) == "instance 3 of 3: 0/2 hosts fit: 2 less than 2 free pinned CPUs"
    assert err.value.diagnosis.instance == 3
    assert err.value.diagnosis.num_instances == 3
    assert err.value.diagnosis.flavor == "p2"
    assert_unchanged(table, before)

    decision = sched.select_destinations(table, request("p2", num_instances=2), NOW)
    assert sorted(decision.hosts) == ["a", "b"]
    assert_unchanged(table, before)  # deciding never changes the table
    commit(table, decision)
    assert table.cell_free[:, 0, C_PCPU].tolist() == [0, 0]
    assert table.n_instances.tolist() == [1, 1]
    assert table.generation.tolist() == [1, 1]
    assert sorted(table.allocations) == ["p2-0-0", "p2-0-1"]


def test_each_instance_sees_the_previous_ones():
    # packing by RAM prefers 'small', which has room for exactly one instance
    hosts = [host("small", vcpus=8, mem=2048), host("big", vcpus=8, mem=8192)]
    table = table_of(hosts, [flavor("f", vcpus=1, mem=2048)])
    sched = scheduler(weighers={"ram": -1.0})
    decision = sched.select_destinations(table, request("f", num_instances=3), NOW)
    assert decision.hosts == ["small", "big", "big"]
    assert decision.generations == {"small": 0, "big": 0}
    [s0, s1, _] = decision.selections
    assert s0.host_use[H_MEM] == 2048
    assert s0.alternates == ("big",)
    assert s1.alternates == ()  # 'small' is full once the first instance is counted
    commit(table, decision)
    assert table.host_free[:, H_MEM].tolist() == [0, 8192 - 4096]


def test_anti_affinity_group_spreads_within_one_request():
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(3)]
    flavors = [flavor("f", vcpus=1, mem=512)]
    groups = [group("anti", "anti-affinity"), group("anti2", "anti-affinity", max_per_host=2)]
    table = table_of(hosts, flavors, groups=groups)
    sched = scheduler(weighers={"ram": -1.0})  # packing would stack them without the group
    decision = sched.select_destinations(
        table, request("f", num_instances=3, server_group="anti"), NOW
    )
    assert sorted(decision.hosts) == ["h0", "h1", "h2"]
    with pytest.raises(NoValidHost) as err:
        sched.select_destinations(table, request("f", num_instances=4, server_group="anti"), NOW)
    assert str(err.value) == (
        "instance 4 of 4: 0/3 hosts fit: 3 already holds members of anti-affinity group anti"
    )
    decision = sched.select_destinations(
        table, request("f", num_instances=6, server_group="anti2"), NOW
    )
    assert sorted(decision.hosts) == ["h0", "h0", "h1", "h1", "h2", "h2"]
    commit(table, decision)
    assert table.group_count("anti2").tolist() == [2, 2, 2]


def test_affinity_group_stacks_within_one_request():
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(4)]
    table = table_of(hosts, [flavor("f", vcpus=1, mem=512)], groups=[group("aff", "affinity")])
    sched = scheduler(weighers={"ram": 1.0})  # spreading would scatter them without the group
    decision = sched.select_destinations(
        table, request("f", num_instances=4, server_group="aff"), NOW
    )
    assert len(set(decision.hosts)) == 1


def test_soft_anti_affinity_spreads_and_soft_affinity_stacks():
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(3)]
    groups = [group("soft_anti", "soft-anti-affinity"), group("soft_aff", "soft-affinity")]
    table = table_of(hosts, [flavor("f", vcpus=1, mem=512)], groups=groups)
    sched = scheduler(weighers={"soft_anti_affinity": 10.0, "soft_affinity": 10.0, "ram": -1.0})
    spread = sched.select_destinations(
        table, request("f", num_instances=3, server_group="soft_anti"), NOW
    )
    assert sorted(spread.hosts) == ["h0", "h1", "h2"]
    stacked = sched.select_destinations(
        table, request("f", num_instances=3, server_group="soft_aff"), NOW
    )
    assert len(set(stacked.hosts)) == 1


# ---------------------------------------------------------------------------- alternates


def _ram_ladder(n: int = 5) -> HostTable:
    """Hosts r0..r{n-1} with increasing free RAM; spreading by RAM ranks them in reverse."""
    hosts = [host(f"r{i}", vcpus=8, mem=1024 * (i + 2)) for i in range(n)]
    return table_of(hosts, [flavor("f", vcpus=1, mem=1024)])


@pytest.mark.parametrize(
    ("max_attempts", "alternates"),
    [(1, ()), (2, ("r3",)), (3, ("r3", "r2")), (5, ("r3", "r2", "r1", "r0")), (9, None)],
)
def test_alternates_best_first(max_attempts, alternates):
    table = _ram_ladder()
    sched = scheduler(weighers={"ram": 1.0}, max_attempts=min(max_attempts, 20))
    [sel] = sched.select_destinations(table, request("f"), NOW).selections
    assert sel.host == "r4"
    if alternates is None:  # more attempts than hosts: every other host once
        alternates = ("r3", "r2", "r1", "r0")
    assert sel.alternates == alternates


def test_alternates_passed_the_filters_and_exclude_the_chosen_host():
    table = _ram_ladder(6)
    table.set_enabled("r4", False)  # would be second best
    sched = scheduler(weighers={"ram": 1.0}, max_attempts=4)
    decision = sched.select_destinations(
        table, request("f", num_instances=2, ignore_hosts=("r3",)), NOW
    )
    [first, second] = decision.selections
    assert first.host == "r5"
    assert first.alternates == ("r2", "r1", "r0")
    # the second instance sees the first: r5 has 6144 free -> 5120; still the best
    assert second.host == "r5"
    for sel in decision.selections:
        assert sel.host not in sel.alternates
        assert len(set(sel.alternates)) == len(sel.alternates)
        assert not {"r3", "r4"} & set(sel.alternates)


def test_retry_excludes_failed_hosts():
    table = _ram_ladder()
    sched = scheduler(weighers={"ram": 1.0})
    decision = sched.select_destinations(table, request("f", ignore_hosts=("r4", "r2")), NOW)
    assert decision.hosts == ["r3"]
    assert decision.selections[0].alternates == ("r1", "r0")
    with pytest.raises(NoValidHost, match=r"^0/5 hosts fit: 5 already failed this request$"):
        sched.select_destinations(table, request("f", ignore_hosts=tuple(table.names)), NOW)


# ---------------------------------------------------------------------------- tie-breaking


def _identical(n: int = 8) -> HostTable:
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(n)]
    return table_of(hosts, [flavor("f", vcpus=1, mem=1024)])


@pytest.mark.parametrize("weighers", [{}, {"ram": 1.0}, {"ram": -1.0, "vcpu": 0.5}])
def test_seeded_tie_breaking(weighers):
    table = _identical()
    sched = scheduler(weighers=weighers)
    chosen = []
    for seed in range(24):
        a = sched.select_destinations(table, request("f", seed=seed), NOW)
        b = sched.select_destinations(table.copy(), request("f", seed=seed), NOW)
        c = scheduler(weighers=weighers).select_destinations(table, request("f", seed=seed), NOW)
        assert a.hosts == b.hosts == c.hosts
        assert a.selections[0].alternates == b.selections[0].alternates
        chosen.append(a.hosts[0])
    # exact ties are drawn from all tied hosts, not just the first few
    assert len(set(chosen)) >= 4


def test_strictly_best_host_wins_for_every_seed():
    table = _ram_ladder()
    sched = scheduler(weighers={"ram": 1.0})
    for seed in range(10):
        assert sched.select_destinations(table, request("f", seed=seed), NOW).hosts == ["r4"]


def test_host_subset_size_draws_from_the_best_few():
    table = _ram_ladder()
    sched = scheduler(weighers={"ram": 1.0}, host_subset_size=2)
    chosen = {
        sched.select_destinations(table, request("f", seed=s), NOW).hosts[0] for s in range(30)
    }
    assert chosen == {"r4", "r3"}


# ---------------------------------------------------------------------------- weights


def test_weights_apply_to_normalised_values():
    hosts = [
        host("a", vcpus=8, mem=10240, io_ops=10),
        host("b", vcpus=8, mem=9216, io_ops=0),
        host("c", vcpus=8, mem=1024, io_ops=5),
    ]
    table = table_of(hosts, [flavor("f", vcpus=1, mem=512)])
    # raw RAM (MB) would swamp I/O ops; scaled to [0, 1] b wins: 0.89 - 0 > 1 - 1.5, 0 - 0.75
    sched = scheduler(weighers={"ram": 1.0, "io_ops": -1.5})
    assert sched.select_destinations(table, request("f"), NOW).hosts == ["b"]
    sched = scheduler(weighers={"ram": 1.0, "io_ops": -0.1})
    assert sched.select_destinations(table, request("f"), NOW).hosts == ["a"]
    sched = scheduler(weighers={"ram": 1.0, "io_ops": 0.0})  # zero weights are dropped
    assert [w.name for w, _ in sched.weighers] == ["ram"]


@pytest.mark.parametrize(
    ("name", "weight", "winner"),
    [
        ("ram", 1.0, "roomy"),
        ("ram", -1.0, "tight"),
        ("vcpu", 1.0, "roomy"),
        ("vcpu", -1.0, "tight"),
        ("disk", 1.0, "roomy"),
        ("disk", -1.0, "tight"),
        ("io_ops", -1.0, "tight"),
        ("io_ops", 1.0, "roomy"),
        ("num_instances", -1.0, "roomy"),
        ("num_instances", 1.0, "tight"),
    ],
)
def test_pack_and_spread(name, weight, winner):
    hosts = [
        host("tight", vcpus=4, mem=4096, hdd=100, io_ops=0),
        host("roomy", vcpus=16, mem=16384, hdd=1000, io_ops=9),
    ]
    existing = [instance("i1", "tight", "f"), instance("i2", "tight", "f")]
    table = table_of(hosts, [flavor("f", vcpus=1, mem=512, disk=10)], existing)
    sched = scheduler(weighers={name: weight})
    assert sched.select_destinations(table, request("f"), NOW).hosts == [winner]


def test_profiles():
    nova = FilterScheduler.from_config(profile("nova"))
    assert [(w.name, weight) for w, weight in nova.weighers] == [
        ("nova_ram", 1.0),
        ("nova_cpu", 1.0),
        ("nova_disk", 1.0),
        ("nova_io_ops", -1.0),
        ("pci", 1.0),
        ("soft_affinity", 1.0),
        ("soft_anti_affinity", 1.0),
    ]
    berth = FilterScheduler.from_config(profile("berth", max_attempts=5))
    assert berth.weighers[0][0].name == "fragmentation"
    assert berth.max_attempts == 5
    assert [f.name for f in berth.filters][:3] == ["compute", "retry", "availability_zone"]
    with pytest.raises(SpecError, match="unknown profile 'greedy'"):
        profile("greedy")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"filters": ["ram", "magic"]}, "unknown filter 'magic'"),
        ({"weighers": [{"name": "luck"}]}, "unknown weigher 'luck'"),
        ({"filters": ["nonexistent.module:Thing"]}, "cannot import plugin"),
        ({"filters": ["berth.core.weighers.load:IoOpsWeigher"]}, "is not a HostFilter"),
        (
            {"filters": ["num_instances"], "filter_params": {"num_instances": {"max": 3}}},
            "filter 'num_instances' params.max: Extra inputs are not permitted",
        ),
        (
            {"weighers": [{"name": "fragmentation", "params": {"largest": 0}}]},
            "weigher 'fragmentation' params.largest",
        ),
    ],
)
def test_config_errors(config, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        FilterScheduler.from_config(SchedulerConfig.model_validate(config))


def test_plugin_by_import_path():
    sched = FilterScheduler.from_config(
        SchedulerConfig(
            filters=["berth.core.filters.ram:RamFilter"],
            weighers=[WeigherConfig(name="berth.core.weighers.resources:RamWeigher", weight=-1)],
        )
    )
    table = _ram_ladder()
    assert sched.select_destinations(table, request("f"), NOW).hosts == ["r0"]


# ---------------------------------------------------------------------------- diagnosis


def test_no_valid_host_diagnosis():
    hosts = [
        host("off", enabled=False, az="az1"),
        host("down", heartbeat=None, az="az1"),
        host("elsewhere", az="az2"),
        host("tiny1", mem=512, az="az1"),
        host("tiny2", mem=1536, az="az1"),
        host("nocpu", vcpus=0, az="az1"),
    ]
    table = table_of(hosts, [flavor("f", vcpus=2, mem=2048)])
    sched = scheduler()
    before = snapshot(table)
    with pytest.raises(NoValidHost) as err:
        sched.select_destinations(table, request("f", availability_zone="az1"), NOW)
    assert_unchanged(table, before)
    diagnosis = err.value.diagnosis
    assert str(err.value) == (
        "0/6 hosts fit: 2 less than 2048 MB free RAM, 1 disabled, "
        "1 no heartbeat in the last 60 s, 1 not in availability zone az1, "
        "1 less than 2 free vCPUs"
    )
    assert diagnosis.total_hosts == 6
    assert sum(r.hosts for r in diagnosis.reasons) == 6
    assert [(r.code, r.filter, r.hosts) for r in diagnosis.reasons] == [
        ("insufficient_ram", "ram", 2),
        ("host_disabled", "compute", 1),
        ("host_down", "compute", 1),
        ("availability_zone", "availability_zone", 1),
        ("insufficient_vcpu", "vcpu", 1),
    ]
    ram = diagnosis.reasons[0]
    assert (ram.resource, ram.requested, ram.best_free) == ("ram_mb", 2048, 1536.0)
    vcpu = diagnosis.reasons[-1]
    assert (vcpu.resource, vcpu.requested, vcpu.best_free) == ("vCPUs", 2, 0.0)
    assert diagnosis.reasons[1].best_free is None
    as_dict = diagnosis.to_dict()
    assert as_dict["message"] == str(err.value)
    assert as_dict["total_hosts"] == 6
    assert as_dict["flavor"] == "f"
    assert as_dict["reasons"][0] == {
        "code": "insufficient_ram",
        "message": "less than 2048 MB free RAM",
        "hosts": 2,
        "filter": "ram",
        "resource": "ram_mb",
        "requested": 2048,
        "best_free": 1536.0,
    }


def test_diagnosis_counts_each_host_once_at_its_first_filter():
    # 'both' lacks RAM and is disabled: counted once, as disabled (compute runs first)
    hosts = [host("both", enabled=False, mem=512), host("ram", mem=512), host("numa", pcpus=1)]
    table = table_of(hosts, [flavor("p", vcpus=2, mem=1024, pinned=True)])
    with pytest.raises(NoValidHost) as err:
        scheduler().select_destinations(table, request("p"), NOW)
    reasons = [(r.code, r.hosts) for r in err.value.diagnosis.reasons]
    assert reasons == [("host_disabled", 1), ("insufficient_ram", 1), ("insufficient_vcpu", 1)]


def test_diagnosis_on_empty_fleet():
    table = table_of([], [flavor("f")])
    with pytest.raises(NoValidHost, match=r"^0/0 hosts fit$"):
        scheduler().select_destinations(table, request("f"), NOW)


# ---------------------------------------------------------------------------- commit


def _two_hosts() -> HostTable:
    hosts = [host("a", cells=2, pcpus=4, mem=8192), host("b", cells=2, pcpus=4, mem=8192)]
    return table_of(hosts, [flavor("p", vcpus=2, mem=1024, pinned=True)])


def test_commit_refuses_a_stale_decision_and_leaves_the_table_unchanged():
    table = _two_hosts()
    sched = scheduler(weighers={"ram": -1.0})
    decision = sched.select_destinations(
        table, request("p", num_instances=2, instance_ids=("x", "y")), NOW
    )
    assert decision.hosts == ["a", "a"]
    table.claim("meanwhile", "a", "p")  # someone else claimed on the chosen host
    before = snapshot(table)
    with pytest.raises(
        StaleGenerationError, match=r"host 'a' changed since the decision \(generation 0 -> 1\)"
    ):
        commit(table, decision)
    assert_unchanged(table, before)
    assert "x" not in table.allocations


def test_commit_refuses_after_a_host_state_change():
    table = _two_hosts()
    decision = scheduler().select_destinations(table, request("p"), NOW)
    table.set_enabled(decision.hosts[0], True)  # any change bumps the generation
    with pytest.raises(StaleGenerationError):
        commit(table, decision)


def test_commit_ignores_changes_on_untouched_hosts_and_cannot_apply_twice():
    table = _two_hosts()
    decision = scheduler(weighers={"ram": -1.0}).select_destinations(table, request("p"), NOW)
    other = "b" if decision.hosts == ["a"] else "a"
    table.claim("meanwhile", other, "p")
    commit(table, decision)
    assert table.n_instances.tolist() == [1, 1]
    with pytest.raises(StaleGenerationError):
        commit(table, decision)
    with pytest.raises(ClaimError, match="already has an allocation"):
        table.claim(decision.selections[0].instance_id, "b", "p")


def test_commit_rolls_back_every_claim_when_one_fails():
    table = _two_hosts()
    sched = scheduler(weighers={"ram": 1.0})
    decision = sched.select_destinations(
        table, request("p", num_instances=2, instance_ids=("x", "y")), NOW
    )
    assert sorted(decision.hosts) == ["a", "b"]
    # 'y' appears elsewhere before the commit (no touched host changes generation)
    table.add_hosts([host("c", cells=2, pcpus=4, mem=8192)], {})
    table.claim("y", "c", "p")
    before = snapshot(table)
    with pytest.raises(ClaimError, match="instance 'y' already has an allocation"):
        commit(table, decision)
    assert_unchanged(table, before)
    assert table.generation.tolist() == [0, 0, 1]


def test_commit_uses_the_decided_footprint():
    table = table_of(
        [host("h", cells=2, pcpus=4, mem=4096)],
        [
            flavor(
                "x",
                vcpus=4,
                mem=4096,
                pinned=True,
                numa=2,
                numa_cpus=("0", "1-3"),
                numa_mem=(1024, 3072),
            )
        ],
    )
    decision = scheduler().select_destinations(table, request("x"), NOW)
    [sel] = decision.selections
    assert sel.cell_use[:, C_PCPU].tolist() == [1, 3]
    commit(table, decision)
    assert table.cell_free[0, :, C_PCPU].tolist() == [3, 1]
    assert np.array_equal(table.allocations["x-0-0"].cell_use, sel.cell_use)


# ---------------------------------------------------------------------------- bad requests


def _spec_table() -> HostTable:
    hosts = [host("h", vcpus=8, mem=8192)]
    return table_of(
        hosts, [flavor("f")], [instance("i1", "h", "f")], groups=[group("g", "affinity")]
    )


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (request("nope"), "unknown flavor 'nope'"),
        (request("f", server_group="ghost"), "server_group: unknown server group 'ghost'"),
        (request("f", instance_ids=("i1",)), "instance_ids: 'i1' already exists"),
        (
            request("f", num_instances=2, instance_ids=("a",)),
            "instance_ids: must have num_instances entries",
        ),
        (request("f", num_instances=2, instance_ids=("x", "i1")), "'i1' already exists"),
    ],
)
def test_bad_requests_are_spec_errors(req, message):
    table = _spec_table()
    before = snapshot(table)
    with pytest.raises(SpecError, match=message):
        scheduler().select_destinations(table, req, NOW)
    assert_unchanged(table, before)


def test_generated_ids_collide_across_requests_with_the_same_seed():
    table = _spec_table()
    sched = scheduler()
    place(sched, table, "f", seed=3)
    with pytest.raises(SpecError, match="instance_ids: 'f-3-0' already exists"):
        sched.select_destinations(table, request("f", seed=3), NOW)
    assert place(sched, table, "f", seed=4).selections[0].instance_id == "f-4-0"


def test_duplicate_ids_within_one_request_are_a_spec_error():
    table = _spec_table()
    before = snapshot(table)
    with pytest.raises(SpecError, match="instance_ids"):
        scheduler().select_destinations(
            table, request("f", num_instances=2, instance_ids=("x", "x")), NOW
        )
    assert_unchanged(table, before)


def test_refused_tentative_claim_leaves_the_table_unchanged():
    table = table_of([host("h", pcpus=1, mem=4096)], [flavor("p", vcpus=1, pinned=True)])
    before = snapshot(table)
    sched = scheduler(["all_hosts"])  # no resource filters: the claim itself refuses
    with pytest.raises(BerthError):
        sched.select_destinations(table, request("p", num_instances=2), NOW)
    assert_unchanged(table, before)


# ---------------------------------------------------------------------------- chance driver


def test_chance_scheduler():
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(5)]
    hosts.append(host("full", vcpus=8, mem=512))
    hosts.append(host("off", vcpus=8, mem=8192, enabled=False))
    table = table_of(hosts, [flavor("f", vcpus=1, mem=1024)])
    sched = FilterScheduler.from_config(
        SchedulerConfig(driver="chance", weighers=[WeigherConfig(name="ram", weight=1.0)])
    )
    assert isinstance(sched, ChanceScheduler)
    assert sched.weighers == []
    fitting = [f"h{i}" for i in range(5)]
    chosen = set()
    for seed in range(30):
        decision = sched.select_destinations(table, request("f", seed=seed), NOW)
        [sel] = decision.selections
        assert sel.host in fitting
        assert len(sel.alternates) == 2
        assert set(sel.alternates) <= set(fitting) - {sel.host}
        # alternates are the next fitting hosts after the chosen one, cyclically
        i = fitting.index(sel.host)
        assert sel.alternates == (fitting[(i + 1) % 5], fitting[(i + 2) % 5])
        again = sched.select_destinations(table, request("f", seed=seed), NOW)
        assert again.hosts == decision.hosts
        chosen.add(sel.host)
    assert len(chosen) >= 3


def test_chance_scheduler_never_overcommits():
    hosts = [host("a", pcpus=2, mem=4096), host("b", pcpus=1, mem=4096)]
    table = table_of(hosts, [flavor("p", vcpus=1, pinned=True)])
    sched = FilterScheduler.from_config(SchedulerConfig(driver="chance"))
    placed = [place(sched, table, "p", seed=s).hosts[0] for s in range(3)]
    assert sorted(placed) == ["a", "a", "b"]
    with pytest.raises(NoValidHost):
        sched.select_destinations(table, request("p", seed=9), NOW)
    assert (table.cell_free >= 0).all()


# ---------------------------------------------------------------------------- capacity


def test_capacity_counts():
    hosts = [
        host("three", pcpus=6, mem=8192),
        host("mem_bound", pcpus=6, mem=2048),
        host("off", pcpus=6, mem=8192, enabled=False),
        host("two_cells", cells=2, pcpus=3, mem=4096),  # 1 + 1: one CPU per cell stranded
        host("busy", pcpus=16, mem=16384),
    ]
    existing = [instance(f"b{i}", "busy", "p") for i in range(3)]
    table = table_of(hosts, [flavor("p", vcpus=2, mem=1024, pinned=True)], existing)
    assert scheduler().capacity(table, "p", NOW).tolist() == [3, 2, 0, 2, 5]
    limited = scheduler(filter_params={"num_instances": {"max_instances_per_host": 4}})
    assert limited.capacity(table, "p", NOW).tolist() == [3, 2, 0, 2, 1]
    # a filter list without the compute filter counts the disabled host
    assert scheduler(["ram"]).capacity(table, "p", NOW).tolist() == [3, 2, 3, 2, 5]
    # the instance limit binds on 'busy': exactly one more goes there
    others = tuple(n for n in table.names if n != "busy")
    place(limited, table, "p", ignore_hosts=others, seed=1)
    with pytest.raises(NoValidHost, match="1 already runs 4 instances"):
        limited.select_destinations(table, request("p", ignore_hosts=others, seed=2), NOW)
    assert limited.capacity(table, "p", NOW).tolist() == [3, 2, 0, 2, 0]


def test_capacity_of_an_empty_fleet():
    table = table_of([], [flavor("f")])
    assert scheduler().capacity(table, "f", NOW).tolist() == []


def test_capacity_respects_page_size_and_static_filters():
    hosts = [
        host("hp2m", pcpus=4, mem=0, huge=4096, page_kb=2048),
        host("hp1g", pcpus=4, mem=0, huge=4096, page_kb=1048576),
        host("az2", pcpus=4, mem=0, huge=4096, page_kb=1048576, az="az2"),
    ]
    flavors = [flavor("hp", vcpus=1, mem=1024, pinned=True, page="1GB", required=["HW_X"])]
    table = table_of(hosts, flavors)
    assert scheduler().capacity(table, "hp", NOW).tolist() == [0, 0, 0]  # nobody has HW_X
    table = table_of(hosts, [flavor("hp", vcpus=1, mem=1024, pinned=True, page="1GB")])
    assert scheduler().capacity(table, "hp", NOW).tolist() == [0, 4, 4]
    assert scheduler(["ram"]).capacity(table, "hp", NOW).tolist() == [4, 4, 4]
