"""The shipped demo fleet loads, places and counts capacity."""

from berth.core.config import profile
from berth.core.engine import FilterScheduler
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.fleet.demo import build_demo_fleet, demo_fleet_path
from berth.fleet.io import load_fleet


def test_shipped_demo_fleet_matches_generator():
    assert load_fleet(demo_fleet_path()) == build_demo_fleet()


def test_demo_places_pinned_numa_flavor():
    fleet = load_fleet(demo_fleet_path())
    table = HostTable.from_fleet(fleet)
    scheduler = FilterScheduler.from_config(profile("berth"))
    decision = scheduler.select_destinations(
        table, RequestSpec(flavor="c3.4xlarge.numa1", num_instances=3), fleet.now or 0.0
    )
    assert len(decision.selections) == 3
    assert all(s.host.startswith(("std", "ent", "ssd")) for s in decision.selections)
