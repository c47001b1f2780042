"""The dashboard's pages and data routes through the real app: login and roles, figures equal
to the API's, tenant scoping, the decision stream, defrag actions, missing assets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from berth.core.fragmentation import fragmentation_rate
from berth.service.dashboard import assets, pages
from tests.dashboard.conftest import login
from tests.service.conftest import Env

PAGES = [
    "/dashboard/",
    "/dashboard/clusters/az1",
    "/dashboard/clusters/az1?pool=dpdk&page=1&family=c3",
    "/dashboard/hosts/dpdk-az1-000",
    "/dashboard/heatmap",
    "/dashboard/heatmap?flavor=m3.8xlarge.numa2",
    "/dashboard/placements",
    "/dashboard/defrag",
    "/dashboard/elastic",
    "/dashboard/instances",
]


def stream(client: Any, after: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The stream's events from `after` (one poll: `seconds=0`)."""
    params: dict[str, Any] = {"seconds": 0}
    if after is not None:
        params["after"] = after
    resp = client.get("/dashboard/api/stream", params=params)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    out = []
    for block in resp.text.split("\n\n"):
        lines = dict(ln.split(": ", 1) for ln in block.splitlines() if ": " in ln)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def cursor(client: Any) -> str:
    page = client.get("/dashboard/placements").text
    return page.split('data-cursor="', 1)[1].split('"', 1)[0]


def test_without_a_token_pages_go_to_login_and_data_is_401(env: Env):
    resp = env.client.get("/dashboard/heatmap", follow_redirects=False)
    assert resp.status_code == 303
    assert resp.headers["location"].startswith("/dashboard/login?next=/dashboard/heatmap")
    assert env.client.get("/dashboard/api/overview").status_code == 401
    assert env.client.get("/dashboard/api/stream").status_code == 401
    assert env.client.get("/dashboard/login").status_code == 200


@pytest.mark.parametrize(
    ("token", "words"),
    [("nope", "unknown or revoked token"), ("", "unknown or revoked token")],
)
def test_a_bad_token_is_refused_at_login(env: Env, token: str, words: str):
    resp = env.client.post("/dashboard/login", data={"token": token}, follow_redirects=False)
    assert resp.status_code == 401
    assert words in resp.text
    assert "berth_dashboard" not in resp.headers.get("set-cookie", "")


def test_an_agent_token_cannot_use_the_dashboard(env: Env):
    _, secret = env.store.create_token("ag", "agent", hosts=("dpdk-az1-000",))
    resp = env.client.post("/dashboard/login", data={"token": secret}, follow_redirects=False)
    assert resp.status_code == 401
    assert "agent tokens cannot use the dashboard" in resp.text


def test_a_group_admin_sees_its_elastic_group_and_no_placements(env: Env):
    juno = {
        "flavor": "c3.large",
        "cores_per_vm": 2,
        "slots_per_vm": 2,
        "queue": {"system": "htcondor", "accounting_group": "group_juno"},
        "max_vms": 3,
    }
    for name in ("juno", "bes"):
        resp = env.client.put(f"/v1/elastic/groups/{name}", json=juno, headers=env.h("admin"))
        assert resp.status_code == 200, resp.text
    _, secret = env.store.create_token("ga", "group-admin", elastic_group="juno")
    client = TestClient(env.app)
    client.post("/dashboard/login", data={"token": secret})
    assert client.get("/dashboard/", follow_redirects=False).headers["location"] == (
        "/dashboard/elastic"
    )
    page = client.get("/dashboard/elastic")
    assert page.status_code == 200
    assert "<td>juno</td>" in page.text
    assert "<td>bes</td>" not in page.text
    assert "<td>bes</td>" in login(env, "reader").get("/dashboard/elastic").text
    assert client.get("/dashboard/placements").status_code == 403
    assert client.get("/dashboard/instances").status_code == 403
    assert client.get("/dashboard/api/stream", params={"seconds": 0}).status_code == 403
    assert client.get("/dashboard/api/overview").status_code == 403


def test_login_keeps_the_token_in_a_strict_httponly_cookie(env: Env):
    resp = env.client.post(
        "/dashboard/login",
        data={"token": env.tokens["reader"], "next": "https://evil.example/"},
        follow_redirects=False,
    )
    assert resp.status_code == 303
    assert resp.headers["location"] == "/dashboard/"  # never off-site
    cookie = resp.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/dashboard" in cookie


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_for_an_admin(env: Env, path: str):
    client = login(env, "admin")
    resp = client.get(path)
    assert resp.status_code == 200, resp.text
    assert "<main>" in resp.text
    assert "admin · admin" in resp.text


def test_a_bearer_header_works_as_well_as_the_cookie(env: Env):
    assert env.get("/dashboard/api/overview", "reader").status_code == 200


def test_overview_capacity_equals_the_api(env: Env):
    env.post("/v1/placements", {"flavor": "c3.4xlarge.numa1", "count": 3})
    client = login(env, "reader")
    data = client.get("/dashboard/api/overview").json()
    flavors = data["flavors"]
    assert "c3.8xlarge" in flavors
    params = {"flavor": flavors}
    by = {
        kind: env.get("/v1/capacity", params={**params, "by": kind}).json()["counts"]
        for kind in ("fleet", "region", "cluster", "pool")
    }
    tree = data["tree"]
    assert tree["capacity"] == by["fleet"]["fleet"]
    seen = 0
    for region in tree["children"]:
        for idc in region["children"]:
            assert idc["capacity"] == by["region"][idc["name"]]
            for cluster in idc["children"]:
                assert cluster["capacity"] == by["cluster"][cluster["name"]]
                for pool in cluster["children"]:
                    assert pool["capacity"] == by["pool"][pool["key"]]
                    seen += 1
    assert seen == len(by["pool"]) == 15
    assert tree["hosts"] == 270
    page = client.get("/dashboard/").text
    n = by["pool"]["az1/dpdk"]["c3.8xlarge"]
    assert f'data-testid="cap-pool-az1/dpdk-c3.8xlarge" title="{n} more c3.8xlarge fit' in page


def test_cluster_and_host_pages_equal_the_api(env: Env):
    client = login(env, "reader")
    api_hosts = {h["name"]: h for h in env.get("/v1/hosts", params={"cluster": "az2"}).json()}
    counts = env.get("/v1/capacity", params={"flavor": ["g3.8xlarge"], "by": "host"}).json()
    page = client.get("/dashboard/clusters/az2", params={"family": "g3"}).text
    first = sorted(api_hosts)[0]
    assert f'href="/dashboard/hosts/{first}"' in page
    detail = client.get(f"/dashboard/hosts/{first}").text
    usage = api_hosts[first]["usage"]
    assert f"{usage['vcpus_used']} / {usage['vcpus']}" in detail
    n = counts["counts"][first]["g3.8xlarge"]
    assert (f"{n} more g3.8xlarge" in detail) == (n > 0)
    assert 'data-testid="cell-0"' in detail


def test_a_tenant_sees_only_its_project(env: Env):
    mine = env.post("/v1/placements", {"flavor": "c3.large"}, "alpha").json()
    theirs = env.post("/v1/placements", {"flavor": "c3.large"}, "beta").json()
    client = login(env, "alpha")
    assert client.get("/dashboard/", follow_redirects=False).headers["location"] == (
        "/dashboard/placements"
    )
    page = client.get("/dashboard/instances").text
    assert mine["instances"][0]["id"] in page
    assert theirs["instances"][0]["id"] not in page
    assert "project-2" not in page
    for path in ("/dashboard/heatmap", "/dashboard/hosts/dpdk-az1-000", "/dashboard/defrag"):
        resp = client.get(path)
        assert resp.status_code == 403, path
        assert "a tenant token cannot read the fleet" in resp.text
    assert client.get("/dashboard/api/overview").status_code == 403
    placements = client.get("/dashboard/placements").text
    assert "project-2" not in placements
    assert "rate-chart" not in placements  # fleet-wide statistics are not a tenant's


def test_the_stream_carries_decisions_and_failure_explanations(env: Env):
    admin, beta = login(env, "admin"), login(env, "beta")
    start, start_beta = cursor(admin), cursor(beta)
    ok = env.post("/v1/placements", {"flavor": "c3.large", "count": 2}, "alpha").json()
    bad = env.post("/v1/placements", {"flavor": "gn3.4xlarge", "count": 40}, "alpha")
    assert bad.status_code == 409
    got = stream(admin, start)
    decisions = [d for kind, d in got if kind == "decision"]
    assert [d["outcome"] for d in decisions] == ["success", "failure"]
    hosts = sorted({i["host"] for i in ok["instances"]})
    assert decisions[0]["detail"].startswith(ok["cluster"] + ": ")
    assert all(h in decisions[0]["detail"] for h in hosts)
    assert decisions[0]["business_type"] == "on-demand"
    assert decisions[0]["count"] == 2
    assert decisions[1]["reason"] == "no_valid_host" or decisions[1]["reason"]
    assert decisions[1]["detail"] == bad.json()["error"]["message"]
    assert "hosts fit" in decisions[1]["detail"]
    assert any(kind == "change" for kind, _ in got)
    # a tenant of another project sees neither, and no fleet changes
    assert stream(beta, start_beta) == []


def test_the_stream_and_the_page_show_why_a_host_won(env: Env):
    """A placement asked with why=true streams its compact why and a one-line summary; the
    page's row for it opens to the breakdown (a placement not asked has neither)."""
    admin = login(env, "admin")
    start = cursor(admin)
    asked = env.post(
        "/v1/placements",
        {"flavor": "c3.4xlarge.numa1", "seed": 7},
        "alpha",
        params={"why": "true", "why_top": 3},
    ).json()
    env.post("/v1/placements", {"flavor": "c3.large"}, "alpha")
    explained, plain = [d for kind, d in stream(admin, start) if kind == "decision"]
    assert plain["why"] is None
    assert plain["why_line"] is None
    [full] = asked["why"]
    [inst] = explained["why"]["instances"]
    assert inst["summary"] == full["summary"]
    assert [c["host"] for c in inst["ranked"]] == [c["host"] for c in full["ranked"]]
    line = explained["why_line"]
    if full["decided_by"] is not None:
        assert line.startswith(f"decided by {full['decided_by']}, margin {full['margin']:.6g}")
    else:
        assert full["draw"] in line or "tie" in line
    page = admin.get("/dashboard/placements").text
    row = page.split(f'data-id="{explained["id"]}"', 1)[1].split("</details>", 1)[0]
    assert 'data-testid="why"' in row
    assert f"<summary>why: {line}</summary>" in row
    assert str(escape(full["summary"])) in row
    for rank, cand in enumerate(full["ranked"], 1):
        assert f'<td class="num">{rank}</td><td>{cand["host"]}</td>' in row
        assert f'<td class="num">{cand["score"]:.6g}</td>' in row
        for part in cand["parts"]:
            assert f"<td>{part['weigher']}</td>" in row
            assert f'<td class="num">{part["contribution"]:.6g}</td>' in row
    plain_row = page.split(f'data-id="{plain["id"]}"', 1)[1].split("</tr>", 1)[0]
    assert "why" not in plain_row


def test_the_stream_resumes_from_last_event_id(env: Env):
    admin = login(env, "admin")
    start = cursor(admin)
    env.post("/v1/placements", {"flavor": "c3.large"})
    first = stream(admin, start)
    resp = admin.get(
        "/dashboard/api/stream", params={"seconds": 0}, headers={"Last-Event-ID": start}
    )
    assert resp.text.count("event: decision") == 1
    assert [k for k, _ in first].count("decision") == 1


def test_defrag_actions_need_the_header_and_a_writing_role(env: Env):
    op, reader = login(env, "operator"), login(env, "reader")
    body = {"cluster": "az1", "flavors": ["c3.8xlarge.numa1"], "max_migrations": 3}
    assert op.post("/dashboard/api/defrag", json=body).status_code == 403  # no header
    hdr = {"X-Berth-Dashboard": "1"}
    assert reader.post("/dashboard/api/defrag", json=body, headers=hdr).status_code == 403
    bad = op.post("/dashboard/api/defrag", json={**body, "cluster": "nope"}, headers=hdr)
    assert bad.status_code in (404, 422)
    plan = op.post("/dashboard/api/defrag", json=body, headers=hdr).json()
    assert plan["state"] == "planned"
    assert plan == env.get(f"/v1/defrag/plans/{plan['id']}").json()
    url = f"/dashboard/api/defrag/{plan['id']}"
    assert reader.post(f"{url}/execute", headers=hdr).status_code == 403
    started = op.post(f"{url}/execute", params={"auto_confirm": True}, headers=hdr).json()
    assert started["state"] in ("running", "done")
    page = op.get(f"/dashboard/defrag/{plan['id']}").text
    assert f'data-testid="state-{plan["id"]}"' in page
    before = plan["before"]["capacity"]["c3.8xlarge.numa1"]
    after = plan["after"]["capacity"]["c3.8xlarge.numa1"]
    assert f'<th>capacity c3.8xlarge.numa1</th><td class="num">{before}</td>' in page
    assert f'<td class="num">{after}</td>' in page
    assert op.post(f"{url}/cancel", headers=hdr).status_code in (200, 409)


def test_heatmap_counts_every_host_and_matches_the_core_rate(fresh_env: Env):
    env = fresh_env
    for cluster in ("az2", "az3"):
        env.post(f"/v1/clusters/{cluster}/leave")
    client = login(env, "reader")
    flavor = "c3.8xlarge.numa1"
    page = client.get("/dashboard/heatmap", params={"flavor": flavor}).text
    table = env.replica.clusters["az1"].table
    expected = 100 * fragmentation_rate(table, flavor)
    assert f'data-testid="frag-rate">{expected:.1f}%' in page
    assert f"{len(table)} hosts; each counted" in page


def test_pages_say_how_to_install_missing_assets(env: Env, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(assets, "node_modules", lambda: None)
    client = login(env, "admin")
    page = client.get("/dashboard/placements")
    assert page.status_code == 200
    assert "npm ci" in page.text
    assert "/dashboard/vendor/" not in page.text  # no script tag that would fail to load
    missing = client.get("/dashboard/vendor/chart.umd.min.js")
    assert missing.status_code == 404
    assert "npm ci" in missing.json()["error"]["message"]


def test_a_fleet_of_many_pools_shows_clusters_and_pools_a_click_away(
    env: Env, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(pages, "MAX_ROWS", 5)
    client = login(env, "reader")
    overview = client.get("/dashboard/").text
    assert 'data-testid="pools-hidden">15 pools' in overview
    assert 'data-node="pool:' not in overview
    assert 'data-node="pool:' in client.get("/dashboard/?pools=true").text
    heat = client.get("/dashboard/heatmap").text
    assert 'href="/dashboard/clusters/az1">az1</a>' in heat
    assert "az1/dpdk" not in heat
    by_pool = env.get("/v1/capacity", params={"flavor": ["c3.large"], "by": "pool"}).json()
    cluster = client.get("/dashboard/clusters/az1").text
    n = by_pool["counts"]["az1/shared"]["c3.large"]
    assert f'data-testid="cap-pool-az1/shared-c3.large" title="{n} more c3.large fit' in cluster


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node["children"] for n in _nodes(child))]


def test_host_states_are_exclusive_and_every_level_sums_its_children(env: Env):
    dpdk_hosts = sorted(
        h["name"]
        for h in env.get("/v1/hosts", params={"cluster": "az1"}).json()
        if h["pool"] == "dpdk"
    )
    drained, disabled = dpdk_hosts[1], dpdk_hosts[2]
    assert env.client.put(f"/v1/hosts/{drained}/drain", headers=env.h("admin")).status_code == 200
    assert env.post(f"/v1/hosts/{disabled}/disable").status_code == 200
    client = login(env, "reader")
    tree = client.get("/dashboard/api/overview").json()["tree"]
    for node in _nodes(tree):
        assert sum(node["states"].values()) == node["hosts"], node["key"]
        if node["children"]:
            kids = node["children"]
            assert node["hosts"] == sum(k["hosts"] for k in kids)
            for what in ("capacity", "usage", "states"):
                for key, value in node[what].items():
                    assert value == sum(k[what][key] for k in kids), (node["key"], what, key)
    dpdk = next(n for n in _nodes(tree) if n["key"] == "az1/dpdk")
    assert dpdk["states"]["draining"] == 1
    assert dpdk["states"]["disabled"] >= 1
    assert 'data-testid="host-state">draining' in client.get(f"/dashboard/hosts/{drained}").text
    assert 'data-testid="host-state">disabled' in client.get(f"/dashboard/hosts/{disabled}").text
    env.client.delete(f"/v1/hosts/{drained}/drain", headers=env.h("admin"))
    env.post(f"/v1/hosts/{disabled}/enable")
