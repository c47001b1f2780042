"""The real OpenStack stack, started once per test session by scripts/ensure-openstack.sh.

`openstack_clusters` is a list with one dict per cluster, as the script's clusters.json has it:
`name`, `compute`, `placement`, `image`, `network` (endpoints), `token` ("admin"),
`transport_url` (RabbitMQ, oslo.messaging form), `notification_exchange`,
`notification_topic`, `hosts` (Nova's host names), `image_id`, `flavors`, `aggregates`,
`logs`. `berth.cloud.openstack.from_stack(entry)` turns one into a driver.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-openstack.sh"


def ensure_openstack() -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(SCRIPT), "up"], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/ensure-openstack.sh up failed:\n{done.stdout}\n{done.stderr}")
    path = Path(done.stdout.strip().splitlines()[-1])
    clusters: list[dict[str, Any]] = json.loads(path.read_text())["clusters"]
    return clusters


@pytest.fixture(scope="session")
def openstack_clusters() -> list[dict[str, Any]]:
    return ensure_openstack()


@pytest.fixture(autouse=True)
def _one_test_on_the_stack_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every xdist worker shares the two clusters: a test that disables a host or fills the
    small hosts must not overlap another's boots, so the tests marked `openstack` take turns."""
    if request.node.get_closest_marker("openstack") is None:
        yield
        return
    home = Path(os.environ.get("BERTH_OPENSTACK_HOME", Path.home() / ".cache/berth-openstack"))
    home.mkdir(parents=True, exist_ok=True)
    with (home / "tests.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
