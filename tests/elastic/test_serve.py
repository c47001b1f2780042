"""`berth serve --elastic FILE` (slow): a real Berth process runs the elastic control loop its
configuration file describes — the session's real Slurm cluster as the queue, a simulated cloud
joined at start — and a restarted process keeps the group's backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector
from berth.fleet.io import dump_fleet
from berth.store.repo import Store
from tests.elastic.batch import SlurmCluster
from tests.service.servers import Server, start, wait_ready
from tests.store.fleets import small_fleet

pytestmark = pytest.mark.slow


def _until(what: str, check: Callable[[], Any], server: Server, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline or not server.alive():
            raise AssertionError(
                f"{what}: not within {timeout} s; {server.log.read_text()[-3000:]}"
            )
        time.sleep(0.2)


def test_serve_runs_the_elastic_loop_from_its_file(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    c = slurm_cluster
    group = c.groups[0]
    dump_fleet(small_fleet(2), tmp_path / "fleet.yaml")
    config = {
        "cycle_seconds": 0.5,
        "watchers": [{"kind": "slurm", "env": c.env}],
        "clouds": [{"cluster": "c1", "simulated": {"fleet": "fleet.yaml", "region": "r1"}}],
        "controller": {"boot_deadline": 2, "backoff_base": 120, "backoff_max": 120},
    }
    (tmp_path / "elastic.yaml").write_text(yaml.safe_dump(config))
    db = f"sqlite:///{tmp_path / 'berth.db'}"
    store = Store.open(db, replica="setup")
    _, token = store.create_token("test", "admin")
    queue = QueueSelector(BatchSystem.SLURM, partition=group, account=group)
    store.put_elastic_group(GroupSpec(group, "p4", 4, 1, queue, max_vms=2))
    store.close()
    headers = {"Authorization": f"Bearer {token}"}
    args = ("--elastic", str(tmp_path / "elastic.yaml"))

    server = start(db, "elastic-1", tmp_path, *args)
    try:
        wait_ready([server], timeout=120)
        c.submit(group, 1, 60.0)  # no node serves it: demand

        def vms() -> list[dict[str, Any]]:
            r = httpx.get(f"{server.url}/v1/elastic/vms", headers=headers, timeout=5)
            return list(r.json()) if r.status_code == 200 else []

        # the loop read the real queue, placed and booted a VM in the simulated cloud; no agent
        # ever reports, so it is reaped at its 2 s boot deadline and the group backs off
        failed = _until(
            "a failed boot", lambda: [v for v in vms() if v["state"] == "failed"], server
        )
        assert [v["group"] for v in failed] == [group]
        assert failed[0]["cluster"] == "c1"
        assert failed[0]["host"].startswith("h-c1-")
    finally:
        server.stop()

    again = start(db, "elastic-2", tmp_path, *args)  # the same database, a new process
    try:
        wait_ready([again], timeout=120)

        def report() -> dict[str, Any] | None:
            r = httpx.get(f"{again.url}/v1/elastic/decision", headers=headers, timeout=5)
            if r.status_code != 200:
                return None
            return next(g for g in r.json()["groups"] if g["group"] == group)

        got = _until("a decision", report, again)
        assert got["idle_jobs"] == 1
        assert "group_backoff" in {n["code"] for n in got["notes"]}  # remembered, not retried
        assert got["started"] == 0
        r = httpx.get(f"{again.url}/v1/elastic/vms", headers=headers, timeout=5)
        assert [v["state"] for v in r.json()] == ["failed"]
    finally:
        again.stop()
        c.cancel_all()
