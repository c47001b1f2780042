"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against one real
`berth serve` process on the demo topology.

Chromium comes from `scripts/ensure-chromium.sh` (`make test` runs it); Playwright's own browser
download is never used. With BERTH_DASHBOARD_SCREENSHOTS=DIR, `check_every_page_renders_cleanly`
saves one PNG per page there (docs/dashboard/ holds the committed ones).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright import sync_api

from berth.store.repo import Store
from tests.service.servers import Server, start, wait_ready

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = os.environ.get("BERTH_DASHBOARD_SCREENSHOTS")
TIMEOUT_MS = 15_000


@dataclass
class Site:
    server: Server
    tokens: dict[str, str]
    errors: list[str] = field(default_factory=list)

    def api(self, method: str, path: str, who: str = "admin", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.request(method, self.server.url + path, headers=headers, timeout=30, **kw)


@pytest.fixture(scope="module")
def site(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One `berth serve` on a copy of the session's demo database (simulated heartbeats bring
    its hosts up) and a token per role."""
    where = tmp_path_factory.mktemp("browser")
    shutil.copy(demo_db, where / "berth.db")
    url = f"sqlite:///{where / 'berth.db'}"
    store = Store.open(url)
    tokens = {
        "admin": store.create_token("admin", "admin")[1],
        "alpha": store.create_token("alpha", "tenant", "project-1")[1],
        "beta": store.create_token("beta", "tenant", "project-2")[1],
    }
    store.close()
    server = start(url, "dashboard", where, "--simulate-agents")
    try:
        wait_ready([server])
        site = Site(server, tokens)
        deadline = time.monotonic() + 30
        while not any(
            site.api("GET", "/v1/capacity", params={"by": "fleet"})
            .json()["counts"]["fleet"]
            .values()
        ):
            assert time.monotonic() < deadline, "no host came up"
            time.sleep(0.2)
        yield site
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure-chromium.sh (make test does)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def fleet_capacity(site: Site) -> dict[str, int]:
    counts: dict[str, dict[str, int]] = site.api(
        "GET", "/v1/capacity", params={"by": "fleet"}
    ).json()["counts"]
    return counts.get("fleet", {})


def open_page(browser: Any, site: Site, who: str) -> Any:
    """A fresh context logged in through the form as `who`; console errors go to site.errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)

    def console(message: Any) -> None:
        if message.type == "error":
            site.errors.append(f"{page.url}: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda e: site.errors.append(f"{page.url}: {e}"))
    page.goto(site.server.url + "/dashboard/")
    assert "/dashboard/login" in page.url
    page.get_by_test_id("token").fill(site.tokens[who])
    page.get_by_test_id("login").click()
    page.wait_for_load_state()
    return page


def check_login_and_overview_numbers_equal_the_api(browser: Any, site: Site):
    page = open_page(browser, site, "admin")
    assert page.get_by_test_id("whoami").inner_text().startswith("admin · admin")
    api = site.api("GET", "/v1/capacity", params={"by": "pool"}).json()["counts"]
    checked = 0
    for pool in ("az1/dpdk", "az2/shared", "az3/local-ssd"):
        for flavor in ("c3.8xlarge", "m3.4xlarge", "c3.large"):
            cell = page.get_by_test_id(f"cap-pool-{pool}-{flavor}")
            assert int(cell.inner_text()) == api[pool][flavor], (pool, flavor)
            checked += 1
    assert checked == 9
    # a placement moves the figures on the open page (the stream's `change` event)
    page.wait_for_function("document.getElementById('live').classList.contains('on')")
    page.evaluate("window.__sameDocument = true")
    body = {"flavor": "c3.2xlarge", "cluster": "az1", "pool": "shared"}
    assert site.api("POST", "/v1/placements", json=body).status_code == 201
    now = site.api("GET", "/v1/capacity", params={"by": "pool"}).json()["counts"]
    want = str(now["az1/shared"]["c3.2xlarge"])
    assert want != str(api["az1/shared"]["c3.2xlarge"])
    page.wait_for_function(
        "want => document.querySelector(`[data-testid='cap-pool-az1/shared-c3.2xlarge']`)"
        ".textContent.trim() === want",
        arg=want,
    )
    assert page.evaluate("window.__sameDocument") is True
    assert site.errors == []
    page.context.close()


def check_placements_stream_live_with_failure_explanations(browser: Any, site: Site):
    page = open_page(browser, site, "admin")
    page.goto(site.server.url + "/dashboard/placements")
    page.wait_for_function("document.getElementById('live').classList.contains('on')")
    page.evaluate("window.__sameDocument = true")
    placed = site.api(
        "POST", "/v1/placements", "alpha", json={"flavor": "c3.2xlarge"}, params={"why": "true"}
    ).json()
    host = placed["instances"][0]["host"]
    row = page.locator("#stream tbody tr.success", has_text=host).first
    row.wait_for()
    assert "c3.2xlarge" in row.inner_text()
    why = row.locator("details.why")  # the live row opens to why its host won
    why.locator("summary").click()
    [explained] = placed["why"]
    assert explained["summary"] in why.inner_text()
    assert explained["ranked"][1]["host"] in why.locator("table.why-table").inner_text()
    failed = site.api("POST", "/v1/placements", json={"flavor": "gn3.4xlarge", "count": 60})
    assert failed.status_code == 409
    bad = page.locator("#stream tbody tr.failure").first
    bad.wait_for()
    assert "hosts fit" in bad.inner_text()
    assert bad.locator("td.detail").inner_text() == failed.json()["error"]["message"]
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    assert site.errors == []
    page.context.close()


def check_a_tenant_cannot_see_another_projects_instances(browser: Any, site: Site):
    theirs = site.api("POST", "/v1/placements", "beta", json={"flavor": "c3.large"}).json()
    mine = site.api("POST", "/v1/placements", "alpha", json={"flavor": "c3.large"}).json()
    page = open_page(browser, site, "alpha")
    page.goto(site.server.url + "/dashboard/instances")
    text = page.get_by_test_id("instances").inner_text()
    assert mine["instances"][0]["id"] in text
    assert theirs["instances"][0]["id"] not in text
    assert "project-2" not in text
    page.goto(site.server.url + "/dashboard/heatmap")
    assert "a tenant token cannot read the fleet" in page.get_by_test_id("refused").inner_text()
    nav = page.locator("header nav").inner_text()
    assert "Overview" not in nav
    assert "Defrag" not in nav
    site.errors[:] = [e for e in site.errors if "/heatmap" not in e]  # the 403 itself
    assert site.errors == []
    page.context.close()


def check_a_defrag_plan_starts_and_shows_its_progress(browser: Any, site: Site):
    body = {
        "cluster": "az1",
        "target": {"objective": "capacity", "flavors": ["c3.4xlarge.numa1"]},
        "budget": {"max_migrations": 4},
    }
    plan = site.api("POST", "/v1/defrag/plans", json=body).json()
    assert plan["migrations"] > 0, plan
    page = open_page(browser, site, "admin")
    page.goto(site.server.url + f"/dashboard/defrag/{plan['id']}")
    page.wait_for_function("document.getElementById('live').classList.contains('on')")
    page.get_by_test_id("auto-confirm").check()
    page.get_by_test_id(f"start-{plan['id']}").click()
    state = page.get_by_test_id(f"state-{plan['id']}")
    page.wait_for_function(
        "id => document.querySelector(`[data-testid='state-${id}']`).textContent.trim() === 'done'",
        arg=plan["id"],
    )
    assert state.inner_text() == "done"
    chips = page.get_by_test_id("steps-by-state").inner_text()
    assert re.search(rf"{plan['migrations']} done", chips), chips
    assert site.api("GET", f"/v1/defrag/plans/{plan['id']}").json()["state"] == "done"
    assert site.errors == []
    page.context.close()


PAGES = {
    "overview": "/dashboard/",
    "cluster": "/dashboard/clusters/az1?pool=dpdk",
    "host": "/dashboard/hosts/dpdk-az1-000",
    "heatmap": "/dashboard/heatmap",
    "placements": "/dashboard/placements",
    "defrag": "/dashboard/defrag",
    "elastic": "/dashboard/elastic",
    "instances": "/dashboard/instances",
}


def check_every_page_renders_cleanly(browser: Any, site: Site):
    """Every page loads with no console error (and, with the flag, is photographed)."""
    group = {
        "flavor": "c3.large",
        "cores_per_vm": 2,
        "slots_per_vm": 2,
        "queue": {"system": "htcondor", "accounting_group": "group_juno"},
        "min_vms": 1,
        "max_vms": 20,
    }
    assert site.api("PUT", "/v1/elastic/groups/juno", json=group).status_code == 200
    page = open_page(browser, site, "admin")
    shots = Path(SHOTS) if SHOTS else None
    for name, path in PAGES.items():
        page.goto(site.server.url + path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(400)  # charts drawn, the live stream connected
        assert page.locator("main h1").count() >= 1, name
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / f"{name}.png"), full_page=False)
    assert site.errors == []
    page.context.close()


CHECKS = (
    check_login_and_overview_numbers_equal_the_api,
    check_placements_stream_live_with_failure_explanations,
    check_a_tenant_cannot_see_another_projects_instances,
    check_a_defrag_plan_starts_and_shows_its_progress,
    check_every_page_renders_cleanly,
)


def test_the_dashboard_in_chromium(browser: Any, site: Site):
    """Every check on one server and one browser: as separate tests, pytest-xdist would hand
    them to different workers, each starting a server and a browser of its own."""
    for check in CHECKS:
        check(browser, site)
