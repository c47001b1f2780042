"""Berth's `nova` profile against Nova 34's own scheduler code, on random fleets and request
sequences (docs/scheduling.md).

Each example builds a fleet and runs a sequence of requests through Berth (committing each
decision); before every request the same fleet, as Nova sees it, goes to the warm Nova runner
(scripts/nova/runner.py). Per request the two must agree on the hosts that pass, on which stage
rejects each other host (Placement or the Nova filter), on success or NoValidHost, and on the
chosen host for every instance unless Nova weighs the two hosts exactly alike.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.explain import NoValidHost
from berth.core.filters.base import Context
from berth.core.filters.max_unit import MaxUnitFilter
from berth.core.flavors import NumaMode
from berth.core.model import Aggregate, Fleet, Instance
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW
from tests.nova.fleets import AGGREGATES, GROUPS, Ask, asks, flavors, hosts
from tests.nova.runner import NovaRunner, nova_hosts

STAGES = {
    "ram": "placement",
    "vcpu": "placement",
    "disk": "placement",
    "traits": "placement",
    "aggregate_instance_extra_specs": "AggregateInstanceExtraSpecsFilter",
    "compute_capabilities": "ComputeCapabilitiesFilter",
    "numa_topology": "NUMATopologyFilter",
    "pinned_memory": "NUMATopologyFilter",
    "server_group_anti_affinity": "ServerGroupAntiAffinityFilter",
    "server_group_affinity": "ServerGroupAffinityFilter",
    "same_host": "SameHostFilter",
    "different_host": "DifferentHostFilter",
}
"""Berth's filter -> where Nova rejects the same host (`max_unit` is split by its parts)."""
ORDER = ["placement", *STAGES.values()]
NOVA_ORDER = [
    "placement",
    "AggregateInstanceExtraSpecsFilter",
    "ComputeCapabilitiesFilter",
    "NUMATopologyFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "SameHostFilter",
    "DifferentHostFilter",
]
EXAMPLES = 300
"""About 3,000 requests a run (6-16 per fleet). No shrinking: a failure prints its example's
draws at once (shrinking one took minutes)."""
DECISIONS = {"requests": 0, "instances": 0, "ties": 0, "no_valid_host": 0}
"""What the session compared (printed by the test's last line when run with -s)."""


def berth_stages(sched: FilterScheduler, table: HostTable, request: RequestSpec) -> dict[str, str]:
    """Each host Berth rejects for the first instance -> the first Nova stage (in Nova's order)
    among the stages of every Berth filter that rejects it."""
    ctx = Context(table, request, table.demand(request.flavor), NOW)
    stages: dict[str, set[str]] = {}
    for flt in sched.filters:
        failed = ~flt.mask(ctx)
        if not failed.any():
            continue
        if isinstance(flt, MaxUnitFilter):
            cpus, memory, disk = flt._host(table, ctx.demand)
            host_part = cpus & memory & disk
            parts = [("placement", failed & ~host_part), ("NUMATopologyFilter", failed & host_part)]
        else:
            parts = [(STAGES.get(flt.name, flt.name), failed)]
        for stage, mask in parts:
            for row in np.flatnonzero(mask):
                stages.setdefault(table.names[row], set()).add(stage)
    return {h: min(s, key=NOVA_ORDER.index) for h, s in stages.items()}


def nova_request(
    fleet: Fleet, request: RequestSpec, ask: Ask, cells: dict[str, Any]
) -> dict[str, Any]:
    f = next(f for f in fleet.flavors if f.name == request.flavor)
    out: dict[str, Any] = {
        "flavor": {
            "name": f.name,
            "vcpus": f.vcpus,
            "memory_mb": f.memory_mb,
            "root_gb": f.root_gb,
            "ephemeral_gb": f.ephemeral_gb,
            "swap_mb": f.swap_mb,
            "extra_specs": dict(f.extra_specs),
        },
        "instance_ids": list(request.ids()),
        "same_host": list(request.same_host),
        "different_host": list(request.different_host),
    }
    if request.server_group is not None:
        g = next(g for g in GROUPS if g.id == request.server_group)
        members = [i for i in fleet.instances if i.server_group == g.id]
        out["group"] = {
            "id": g.id,
            "policy": g.policy.value,
            "max_server_per_host": g.max_server_per_host,
            "members": [i.id for i in members] + list(request.ids()),
            "hosts": [i.host for i in members],
        }
    return out


def run_sequence(fleet: Fleet, sequence: list[Ask], seed: int) -> list[dict[str, Any]]:
    """Berth's side: each request decided on the fleet so far, then committed."""
    table = HostTable.from_fleet(fleet)
    sched = FilterScheduler.from_config(profile("nova"))
    instances: list[Instance] = []
    cells: dict[str, list[tuple[int, int, int]]] = {}
    steps = []
    for k, ask in enumerate(sequence):
        spec = table.flavors[f"f{ask.flavor}"]
        count = ask.count if spec.numa_mode == NumaMode.NONE else 1
        ids = tuple(str(uuid.UUID(int=seed * 1000 + k * 10 + i)) for i in range(count))
        existing = [i.id for i in instances]
        request = RequestSpec(
            flavor=spec.name,
            num_instances=count,
            server_group=GROUPS[ask.group].id if ask.group is not None else None,
            same_host=tuple(existing[-1:]) if ask.same_host else (),
            different_host=tuple(existing[:1]) if ask.different_host else (),
            instance_ids=ids,
            seed=seed + k,
        )
        now = fleet.model_copy(update={"instances": list(instances)})
        case = {"hosts": nova_hosts(now, cells), "request": nova_request(now, request, ask, cells)}
        stages = berth_stages(sched, table, request)
        decision: Decision | None
        try:
            decision = sched.select_destinations(table, request, NOW)
        except NoValidHost:
            decision = None
        steps.append({"case": case, "stages": stages, "decision": decision, "hosts": table.names})
        if decision is None:
            continue
        commit(table, decision)
        demand = table.demand(spec.name)
        for sel in decision.selections:
            instances.append(
                Instance(
                    id=sel.instance_id,
                    host=sel.host,
                    flavor=spec.name,
                    server_group=request.server_group,
                )
            )
            cells[sel.instance_id] = demand.cells_used(sel.cell_use)
    return steps


def compare(step: dict[str, Any], nova: dict[str, Any]) -> None:
    assert "error" not in nova, nova.get("error")
    decision: Decision | None = step["decision"]
    DECISIONS["requests"] += 1
    stages: dict[str, str] = step["stages"]
    first = nova["steps"][0]
    names = [h["name"] for h in step["case"]["hosts"]]
    berth_passed = sorted(h for h in names if h not in stages)
    assert berth_passed == first["passed"], "feasible sets differ"
    nova_stages = dict(nova["rejected"])
    assert stages == nova_stages, "rejections differ"
    nova_chosen = [s["chosen"] for s in nova["steps"]]
    if decision is None:
        assert None in nova_chosen, f"Berth: NoValidHost; Nova placed on {nova_chosen}"
        DECISIONS["no_valid_host"] += 1
        return
    assert None not in nova_chosen, f"Nova: NoValidHost; Berth placed on {decision.hosts}"
    DECISIONS["instances"] += len(decision.hosts)
    for berth_host, nova_host, nstep in zip(
        decision.hosts, nova_chosen, nova["steps"], strict=True
    ):
        if berth_host != nova_host:
            w = nstep["weights"]
            assert berth_host in w, f"Berth chose {berth_host}, which Nova filtered out"
            assert abs(w[berth_host] - w[nova_host]) <= 1e-9 * max(1.0, abs(w[nova_host])), (
                f"Berth chose {berth_host} ({w[berth_host]}), Nova {nova_host} ({w[nova_host]})"
            )
            DECISIONS["ties"] += 1
            return  # the states part: later instances of this request are not comparable


@pytest.mark.slow
@settings(max_examples=EXAMPLES, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(data=st.data())
def test_berth_decides_as_nova(nova: NovaRunner, data: st.DataObject) -> None:
    n_hosts = data.draw(st.integers(2, 6), label="hosts")
    n_flavors = data.draw(st.integers(2, 5), label="flavors")
    fleet = Fleet(
        now=NOW,
        aggregates=[Aggregate(name=k, metadata=v) for k, v in AGGREGATES.items()],
        hosts=data.draw(hosts(n_hosts), label="fleet"),
        flavors=data.draw(flavors(n_flavors), label="catalogue"),
        server_groups=list(GROUPS),
    )
    sequence = data.draw(asks(n_flavors, data.draw(st.integers(6, 16))), label="requests")
    steps = run_sequence(fleet, sequence, data.draw(st.integers(0, 10**6)))
    results = nova.run([s["case"] for s in steps])
    for k, (step, result) in enumerate(zip(steps, results, strict=True)):
        try:
            compare(step, result)
        except AssertionError as exc:
            raise AssertionError(
                f"request {k}: {exc}\n{step['case']['request']}\n{result}"
            ) from None


@pytest.mark.slow
def test_the_comparison_covered_enough(nova: NovaRunner) -> None:
    """Runs after the property (file order): it compared thousands of requests."""
    if DECISIONS["requests"] == 0:
        pytest.skip("the differential property did not run in this process")
    print(f"Nova {nova.version}: {DECISIONS}")
    assert DECISIONS["requests"] >= 2000
    assert DECISIONS["instances"] >= 500
