"""The real OpenStack stack, started once per test session by scripts/ensure-openstack.sh.

`openstack_clusters` is a list with one dict per cluster, as the script's clusters.json has it:
`name`, `compute`, `placement`, `image`, `network` (endpoints), `token` ("admin"),
`transport_url` (RabbitMQ, oslo.messaging form), `notification_exchange`,
`notification_topic`, `hosts` (Nova's host names), `image_id`, `flavors`, `aggregates`,
`logs`. `berth.cloud.openstack.from_stack(entry)` turns one into a driver.
"""

from __future__ import annotations

import json
import subprocess
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
