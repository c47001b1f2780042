"""`berth cluster add|list|remove` against a real `berth serve` (its feed threads running)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.service.cloudenv import cloud_fleet
from tests.service.servers import BERTH, start, wait_ready


def berth(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BERTH, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_a_simulated_cluster_joins_is_driven_and_leaves(tmp_path: Path):
    fleet = tmp_path / "sim1.json"
    fleet.write_text(cloud_fleet("sim1", n=3, instances=1).model_dump_json())
    server = start(
        f"sqlite:///{tmp_path / 'berth.db'}", "cl", tmp_path, "--load-demo", "--print-admin-token"
    )
    try:
        wait_ready([server])
        log = server.log.read_text()
        token = next(line.split()[-1] for line in log.splitlines() if "admin token" in line)
        common = ["--url", server.url, "--token", token]
        added = berth(
            "cluster",
            "add",
            "sim1",
            "--region",
            "idc-north",
            "--simulated",
            str(fleet),
            "--json",
            *common,
        )
        assert added.returncode == 0, added.stderr
        body = json.loads(added.stdout)
        assert body["hosts"] == 3
        assert body["driver"]["state"] == "joined"
        table = berth("cluster", "list", *common)
        assert table.returncode == 0
        assert "sim1" in table.stdout
        assert "simulated" in table.stdout
        placed = berth("api", "place", "--flavor", "p4", "--cluster", "sim1", "--json", *common)
        assert placed.returncode == 0, placed.stderr
        iid = json.loads(placed.stdout)["instances"][0]["id"]
        for _ in range(50):  # the feed thread turns the server active
            got = json.loads(berth("api", "instances", "--json", *common).stdout)
            states = {i["id"]: (i.get("server") or {}).get("state") for i in got}
            if states.get(iid) == "active":
                break
            time.sleep(0.2)
        assert states[iid] == "active"
        assert states["sim1-old-0"] == "active"  # imported with the cluster
        bad = berth("cluster", "add", "sim2", "--region", "idc-north", "--openstack", *common)
        assert bad.returncode == 2
        assert "--compute" in bad.stderr
        gone = berth("cluster", "remove", "sim1", "--json", *common)
        assert gone.returncode == 0, gone.stderr
        assert json.loads(gone.stdout)["driver"]["state"] == "leaving"
        again = berth("api", "place", "--flavor", "p4", "--cluster", "sim1", *common)
        assert again.returncode == 1
    finally:
        server.stop()
