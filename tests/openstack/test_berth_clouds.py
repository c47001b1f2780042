"""Berth driving the two real OpenStack clusters of scripts/ensure-openstack.sh (Nova 34,
Placement 16, Glance, fake-driver computes): join both (Berth's capacity equals Placement's),
boot 100 servers through Berth on the hosts it chose (Placement's allocations match Berth's
claims), fall back when Nova fails a boot on a disabled host, notice a server deleted in Nova,
run a defrag plan as real live migrations, recover a restart between the boot intent and the
boot, and leave a cluster with its servers running. The stack is shared: only Berth's own
servers are compared and cleaned up. Slow: the stack starts once per session."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from berth.cloud.driver import CloudError
from berth.cloud.openstack import from_stack
from berth.cloud.openstack.reading import placement_get
from berth.policy.model import Policy
from berth.policy.outcome import Placement, ScheduleRequest
from berth.service.clouds.booting import BootTarget
from berth.service.clouds.claiming import Claim
from berth.service.placing.plain import PlaceArgs, choose, place
from berth.service.policy_topology import policy_view
from tests.service.cloudenv import CloudEnv, make_cloud_env

pytestmark = [pytest.mark.slow, pytest.mark.openstack]

TOKEN_VAR = "BERTH_TEST_OPENSTACK_TOKEN"

POLICY = Policy.model_validate(
    {  # /v1/schedule's pipeline: m1.tiny (as Nova has it) in the hosts of rack A (cluster1)
        "pools": [{"name": "rack-a", "traits": ["CUSTOM_RACK_A"]}],
        "families": [{"name": "compute", "pool": "rack-a"}],
        "flavors": [
            {"name": "m1.tiny", "family": "compute", "vcpus": 1, "memory_mb": 512, "root_gb": 1}
        ],
        "variants": [{"name": "plain", "suffix": ""}],
        "business": {
            kind: {"variants": ["plain"]} for kind in ("on-demand", "auto-scaling", "preemptible")
        },
    }
)


@pytest.fixture(scope="module")
def stack(openstack_clusters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The clusters of scripts/ensure-openstack.sh (tests/openstack/conftest.py)."""
    return openstack_clusters


def config_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A join's driver config: endpoints and a credential reference, no secret."""
    return {
        "compute": entry["compute"],
        "placement": entry["placement"],
        "image": entry.get("image"),
        "auth": {"endpoint": entry["compute"]},
        "credential_ref": f"env:{TOKEN_VAR}",
        "boot_image": entry["image_id"],
        "transport_url": entry["transport_url"],
    }


def _clean(env: CloudEnv, cluster: str) -> None:
    """Delete the servers Berth booted here (the stack is shared: others' servers stay)."""
    driver = env.clouds.registry.get(cluster)
    if driver is None:
        return
    ours = {
        r.server_id
        for r in env.store.list_servers(cluster)
        if r.server_id is not None and r.instance_id.startswith("i-")  # Berth's instance ids
    }

    def delete(sid: str) -> None:
        with contextlib.suppress(CloudError):
            driver.delete(sid)

    with ThreadPoolExecutor(8) as pool:  # Nova deletes one at a time per compute: overlap them
        list(pool.map(delete, sorted(ours)))
    deadline = time.monotonic() + 120
    while ours & {s.id for s in driver.servers()} and time.monotonic() < deadline:
        time.sleep(0.5)
    env.clouds.reconcile(cluster)  # Berth releases the claims of the servers that went


def _clean_all(env: CloudEnv, clusters: list[str]) -> None:
    """`_clean` in every cluster at once (each cluster's computes delete in parallel)."""
    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(lambda name: _clean(env, name), clusters))


@pytest.fixture(scope="module")
def berth(
    stack: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[CloudEnv, str]]:
    os.environ[TOKEN_VAR] = stack[0]["token"]
    url = f"sqlite:///{tmp_path_factory.mktemp('berth-os') / 'berth.db'}"
    # a build Nova leaves in BUILD (its conductor out of database connections on a busy
    # machine) is given up after 2 minutes and booted on an alternate, as the service would
    env = make_cloud_env(url, grace=0.0, build_timeout=120.0, policy=POLICY)
    for entry in stack:
        r = env.post(
            "/v1/clusters",
            {
                "name": entry["name"],
                "region": "r1",
                "driver": {"kind": "openstack", "config": config_of(entry)},
            },
        )
        assert r.status_code == 201, r.text
    yield env, url
    _clean_all(env, [entry["name"] for entry in stack])
    env.close()


def _settle(env: CloudEnv, cluster: str, timeout: float = 120) -> None:
    """Follow the feed until every server Berth booted is active."""
    deadline = time.monotonic() + timeout
    full = time.monotonic() + 60  # the feed thread's periodic reconcile, as in the service
    while time.monotonic() < deadline:
        env.clouds.poll(cluster, 1.0)
        if time.monotonic() > full:
            env.clouds.reconcile(cluster)
            full = time.monotonic() + 60
        states = {
            s.state
            for s in env.store.list_servers(cluster)
            if s.instance_id.startswith("i-") and s.state not in ("deleted", "failed")
        }
        if states <= {"active"}:
            return
    raise AssertionError(f"{cluster} did not settle: {env.store.list_servers(cluster)}")


def _nova(env: CloudEnv, cluster: str, names: Iterable[str]) -> dict[str, str]:
    """Nova's servers named `names`: name -> host (the stack is shared with other tests)."""
    driver = env.clouds.registry.get(cluster)
    assert driver is not None
    wanted = set(names)
    return {
        s.name: s.host
        for s in driver.servers()
        if s.host and s.state.value != "error" and s.name in wanted
    }


def _claims(env: CloudEnv, cluster: str, names: Iterable[str]) -> dict[str, str]:
    wanted = set(names)
    return {k: v for k, v in env.claims(cluster).items() if k in wanted}


def _allocations(env: CloudEnv, cluster: str) -> dict[str, str]:
    """Placement's allocations: instance (server name) -> Berth's host name of the provider
    (one GET per provider, not per server)."""
    driver: Any = env.clouds.registry.get(cluster)
    name_of = {s.id: s.name for s in driver.servers()}
    out = {}
    for rp in _placement(driver, "/resource_providers")["resource_providers"]:
        host = driver.config.prefix + rp["name"].split(".")[0]
        allocs = _placement(driver, f"/resource_providers/{rp['uuid']}/allocations")
        for consumer in allocs["allocations"]:
            if consumer in name_of:
                out[name_of[consumer]] = host
    return out


def test_two_clusters_join_and_berth_holds_their_hosts(berth, stack):
    env, _ = berth
    listed = {c["name"]: c for c in env.get("/v1/clusters").json()}
    for entry in stack:
        c = listed[entry["name"]]
        assert c["driver"]["state"] == "joined"
        assert c["hosts"] == len(entry["hosts"])
        shown = json.dumps(c["driver"]["config"])
        assert c["driver"]["config"]["credential_ref"] == f"env:{TOKEN_VAR}"
        assert "guest:guest" not in shown  # the transport URL's password is not shown


def _placement(driver: Any, path: str) -> Any:
    return placement_get(driver.conn, path)


def test_berths_capacity_equals_placements(berth, stack):
    env, _ = berth
    for entry in stack:
        driver: Any = env.clouds.registry.get(entry["name"])
        providers = _placement(driver, "/resource_providers")["resource_providers"]
        assert len(providers) == len(entry["hosts"])
        for rp in providers:
            inv = _placement(driver, f"/resource_providers/{rp['uuid']}/inventories")["inventories"]
            host = env.store.get_host(driver.config.prefix + rp["name"].split(".")[0]).host
            for rc, berth_units, ratio in (
                ("VCPU", sum(c.shared_cpus for c in host.numa_cells), host.cpu_allocation_ratio),
                ("PCPU", sum(c.dedicated_cpus for c in host.numa_cells), 1.0),
                ("MEMORY_MB", sum(c.memory_mb for c in host.numa_cells), host.ram_allocation_ratio),
            ):
                i = inv.get(rc)
                usable = 0 if i is None else i["total"] - i["reserved"]
                assert berth_units == usable, (rp["name"], rc)
                if i is not None:
                    assert int(berth_units * ratio) == int(usable * i["allocation_ratio"])


def test_servers_land_on_the_hosts_berth_chose(berth, stack):
    """100 servers, 50 in each cluster (a page of Nova's server list stays under the request
    line limit of the stack's Neutron stand-in, which Nova asks about every listed server)."""
    env, _ = berth
    names = [entry["name"] for entry in stack]
    chosen: dict[str, dict[str, str]] = {name: {} for name in names}
    flavors = {name: _flavor(env, name) for name in names}

    def fill(name: str) -> None:
        """50 servers in placements of 10 (the clusters' own APIs work in parallel)."""
        for _ in range(5):
            env.clouds.poll(name)  # what the feed thread does between requests
            r = env.place(name, 10, flavor=flavors[name])
            assert r.status_code == 201, r.text
            chosen[name].update({i["id"]: i["host"] for i in r.json()["instances"]})

    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(fill, names))
        accepted = time.perf_counter() - started
        for name in names:
            _settle(env, name, timeout=300)
        active = time.perf_counter() - started
        print(
            f"\n100 boots through Berth: accepted in {accepted:.1f} s ({100 / accepted:.2f}/s), "
            f"all ACTIVE in {active:.1f} s ({100 / active:.2f}/s)"
        )
        for name in names:
            assert len(chosen[name]) == 50
            held = _claims(env, name, chosen[name])
            # Nova runs every server on the host where Berth holds its claim, and Placement
            # allocated it there
            assert _nova(env, name, chosen[name]) == held
            allocations = _allocations(env, name)
            assert {k: allocations.get(k) for k in chosen[name]} == held
            # each landed on the host Berth chose, unless Nova failed that boot and Berth fell
            # back to an alternate (a build timing out on a loaded machine): then the first
            # host tried is the chosen one
            tried = {r.instance_id: r.tried for r in env.store.list_servers(name)}
            moved = {i for i in chosen[name] if tried[i]}
            assert len(moved) <= 5, moved
            assert {i: h for i, h in held.items() if i not in moved} == {
                i: h for i, h in chosen[name].items() if i not in moved
            }
            assert all(tried[i][0]["host"] == chosen[name][i] for i in moved)
        checked = time.perf_counter() - started
    finally:  # the hosts are small: the tests after this one need them empty again
        _clean_all(env, names)
    print(f"checked at {checked:.1f} s, cleaned at {time.perf_counter() - started:.1f} s")


_SMALLEST: dict[str, str] = {}


def _flavor(env: CloudEnv, cluster: str) -> str:
    """The smallest flavor the cluster offers (its import read once per module)."""
    if cluster not in _SMALLEST:
        flavors = {f["name"]: f for f in env.get("/v1/flavors").json()}
        driver = env.clouds.registry.get(cluster)
        assert driver is not None
        offered = [f.name for f in driver.inventory().flavors if f.name in flavors]
        smallest = min(offered, key=lambda n: (flavors[n]["vcpus"], flavors[n]["memory_mb"]))
        _SMALLEST[cluster] = smallest
    return _SMALLEST[cluster]


def test_a_refused_boot_falls_back_and_a_nova_delete_is_noticed(berth, stack):
    env, _ = berth
    cluster = stack[0]["name"]
    flavor = _flavor(env, cluster)
    replica = env.app.state.replica
    env.clouds.poll(cluster)
    with replica.lock:
        sel = choose(
            replica, PlaceArgs(flavor, 1, "default", cluster=cluster, seed=11)
        ).decision.selections[0]
    driver = env.clouds.registry.get(cluster)
    assert driver is not None
    driver.set_host_enabled(sel.host, False, "berth test: refuse")
    try:
        r = env.place(cluster, 1, flavor=flavor, seed=11)
        assert r.status_code == 201, r.text
        iid = r.json()["instances"][0]["id"]
        # Nova takes a boot on a disabled host and fails its build (NoValidHost): the feed
        # reports ERROR, Berth deletes that server and boots on the next alternate
        _settle(env, cluster)
    finally:
        driver.set_host_enabled(sel.host, True)
    inst = env.get(f"/v1/instances/{iid}").json()
    assert inst["host"] != sel.host
    assert inst["host"] == sel.alternates[0]
    assert inst["server"]["tried"][0]["host"] == sel.host
    assert _nova(env, cluster, [iid]) == {iid: inst["host"]}
    # deleted directly in Nova: noticed by the feed (a notification, or the next poll)
    driver.delete(inst["server"]["server_id"])
    deadline = time.monotonic() + 60
    while inst["id"] in env.claims(cluster) and time.monotonic() < deadline:
        env.clouds.poll(cluster, 1.0)
    assert inst["id"] not in env.claims(cluster)


def test_a_defrag_plan_runs_as_live_migrations(berth, stack):
    env, _ = berth
    cluster = stack[0]["name"]
    flavor = _flavor(env, cluster)
    mine: list[str] = []
    for _ in range(len(stack[0]["hosts"])):  # one server per host
        env.clouds.poll(cluster)
        r = env.place(cluster, 1, flavor=flavor, different_host=mine)
        assert r.status_code == 201, r.text
        mine.append(r.json()["instances"][0]["id"])
    _settle(env, cluster)
    body = {
        "cluster": cluster,
        "target": {"objective": "empty-hosts"},
        "budget": {"max_migrations": 2},
    }
    # The stack is shared: another test's servers still being deleted in Nova can hold the
    # hosts for a few seconds (Berth adopts them until they go). Plan again after a
    # reconcile before concluding that no migration empties a host.
    for _ in range(4):
        r = env.post("/v1/defrag/plans", body)
        assert r.status_code == 201, r.text
        plan = r.json()
        if plan["migrations"] > 0:
            break
        time.sleep(5)
        env.clouds.reconcile(cluster)
    assert plan["migrations"] > 0, (plan, env.claims(cluster))
    assert env.post(f"/v1/defrag/plans/{plan['id']}/execute", {}).status_code == 200
    defrag = env.app.state.defrag
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        defrag.tick()
        env.clouds.poll(cluster, 1.0)
        final = env.get(f"/v1/defrag/plans/{plan['id']}").json()
        if final["state"] == "done":
            break
    assert final["state"] == "done", final
    moved = {s["instance_id"]: s["target"] for s in final["steps"] if s["state"] == "done"}
    assert moved  # real live migrations, each confirmed when Nova reported the server there
    assert _nova(env, cluster, moved) == moved == _claims(env, cluster, moved)
    allocations = _allocations(env, cluster)
    assert {k: allocations.get(k) for k in moved} == moved


def test_restart_between_intent_and_boot_then_leave_keeps_servers(berth, stack):
    env, url = berth
    cluster = stack[1]["name"]
    flavor = _flavor(env, cluster)
    env.clouds.poll(cluster)
    placed = place(env.app.state.replica, PlaceArgs(flavor, 2, "default", cluster=cluster))
    env.clouds.booter.write_intents(
        cluster,
        [
            BootTarget(Claim(s.instance_id, cluster, flavor), s.host, s.alternates)
            for s in placed.decision.selections
        ],
    )
    # a second replica on the same database (this one "died" after the intents): it boots them
    other = make_cloud_env(url, grace=0.0, replica="r2")
    try:
        done = other.clouds.reconcile(cluster)
        assert sorted(done.booted) == sorted(s.instance_id for s in placed.decision.selections)
        _settle(other, cluster)
        want = {s.instance_id: s.host for s in placed.decision.selections}
        assert _nova(other, cluster, want) == want == _claims(other, cluster, want)
        # leaving: no more placements, the servers keep running
        r = other.delete(f"/v1/clusters/{cluster}")
        assert r.status_code == 200, r.text
        assert r.json()["driver"]["state"] == "leaving"
        assert _nova(env, cluster, want) == want
    finally:
        other.client.__exit__(None, None, None)
        other.store.close()


def _decide(env: CloudEnv, request: ScheduleRequest) -> Placement:
    """The pipeline's decision now, without committing it (what /v1/schedule will choose)."""
    replica = env.app.state.replica
    view = policy_view(replica)
    assert view is not None
    replica.sync()
    with view.lock, replica.lock:
        outcome = view.engine.decide(request, replica.clock())
    assert isinstance(outcome, Placement), outcome
    return outcome


def test_schedule_boots_in_a_driven_cluster_falls_back_and_releases(berth, stack):
    """/v1/schedule in a cluster Berth drives boots like /v1/placements: on the pipeline's
    host, an alternate when Nova fails the build there, the claim released when none boots."""
    env, _ = berth
    cluster = stack[0]["name"]
    driver = env.clouds.registry.get(cluster)
    assert driver is not None
    env.clouds.poll(cluster)
    net = {"name": "net-rack-a", "cluster": cluster, "cidr": "10.13.0.0/24", "total": 250}
    r = env.post("/v1/networks", net)  # the pipeline places where a network has the IPs
    assert r.status_code == 201, r.text
    ask = {"region": "r1", "flavor": "m1.tiny", "count": 1, "seed": 7}
    sel = _decide(env, ScheduleRequest(**ask)).decision.selections[0]
    assert sel.alternates  # rack A has two hosts
    driver.set_host_enabled(sel.host, False, "berth test: refuse")  # Berth has not heard
    try:
        r = env.post("/v1/schedule", ask)
        assert r.status_code == 201, r.text
        body = r.json()
        assert (body["cluster"], body["pool"]) == (cluster, "rack-a")
        (inst,) = body["instances"]
        assert inst["server"]["server_id"]  # booted, not only recorded
        _settle(env, cluster)
        shown = env.get(f"/v1/instances/{inst['id']}").json()
        assert shown["host"] == sel.alternates[0]
        assert shown["server"]["tried"][0]["host"] == sel.host
        want = {inst["id"]: sel.alternates[0]}
        assert _nova(env, cluster, want) == want == _claims(env, cluster, want)
        assert {k: _allocations(env, cluster).get(k) for k in want} == want
        # both hosts of the pool fail the build: the claim is released, no server is left
        driver.set_host_enabled(sel.alternates[0], False, "berth test: refuse")
        r = env.post("/v1/schedule", {**ask, "seed": 8})
        assert r.status_code == 201, r.text
        (lost,) = r.json()["instances"]
        _settle(env, cluster)
        record = env.get(f"/v1/clusters/{cluster}/servers?state=failed").json()
        assert lost["id"] in {x["instance_id"] for x in record}
        assert lost["id"] not in env.claims(cluster)
        assert _nova(env, cluster, [lost["id"]]) == {}
    finally:
        for host in (sel.host, *sel.alternates[:1]):
            driver.set_host_enabled(host, True)
        _clean(env, cluster)


def test_nova_server_groups_become_deployment_sets(stack, tmp_path):
    """A server group made and booted into through Nova's API is, after a join, a deployment
    set of its project with its members, and Berth keeps its policy."""
    entry = stack[1]
    nova = from_stack(entry, notifications=False)
    conn = nova.conn
    anti = conn.compute.create_server_group(name="t-anti", policy="anti-affinity")
    soft = conn.compute.create_server_group(name="t-soft", policy="soft-affinity")
    flavor = conn.compute.find_flavor("m1.tiny", ignore_missing=False)
    members = [
        conn.compute.create_server(
            name=f"t-member-{i}",
            flavor_id=flavor.id,
            image_id=entry["image_id"],
            networks="none",
            scheduler_hints={"group": anti.id},
        ).id
        for i in range(len(entry["hosts"]))
    ]
    other = None
    try:
        hosts = {nova.wait_for(sid, timeout=120).host for sid in members}
        assert len(hosts) == len(entry["hosts"])  # Nova kept them apart
        other = make_cloud_env(f"sqlite:///{tmp_path / 'berth.db'}")
        r = other.post(
            "/v1/clusters",
            {
                "name": entry["name"],
                "region": "r1",
                "driver": {"kind": "openstack", "config": config_of(entry)},
            },
        )
        assert r.status_code == 201, r.text
        sets = {g["id"]: g for g in other.get("/v1/deployment-sets?project=admin").json()}
        assert sets[anti.id]["policy"] == "anti-affinity"
        assert sets[anti.id]["members"] == len(members)
        assert sets[anti.id]["max_per_host"] == 1
        assert sets[soft.id]["policy"] == "soft-affinity"
        assert sets[soft.id]["members"] == 0
        for sid in members:
            shown = other.get(f"/v1/instances/{sid}").json()
            assert (shown["deployment_set"], shown["project"]) == (anti.id, "admin")
        # every host has a member: Berth places no more in the set, as Nova would not
        r = other.place(entry["name"], 1, flavor="m1.tiny", deployment_set=anti.id, project="admin")
        assert r.status_code == 409, r.text
    finally:
        if other is not None:
            other.close()
        for sid in members:
            with contextlib.suppress(Exception):
                conn.compute.delete_server(sid)
        deadline = time.monotonic() + 60
        while set(members) & {s.id for s in nova.servers()} and time.monotonic() < deadline:
            time.sleep(0.5)
        for g in (anti, soft):
            conn.compute.delete_server_group(g)
        nova.close()
