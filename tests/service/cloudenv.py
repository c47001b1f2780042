"""A service driving simulated clouds through the real app (tests of `berth.service.clouds`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from berth.cloud.simulated import SimulatedCloud
from berth.core.model import Fleet, Instance
from berth.policy.model import Policy
from berth.service.app import create_app
from berth.service.clouds.service import CloudService
from berth.service.config import ServiceConfig
from berth.store.repo import Store
from tests.store.fleets import FLAVORS, host

_names = itertools.count(1)


def cloud_fleet(prefix: str, n: int = 3, instances: int = 0) -> Fleet:
    """`n` hosts named `<prefix>-h-<i>` (two NUMA cells, 8 pinned + 4 shared CPUs each) with
    `instances` p4 servers already running, spread over the hosts."""
    hosts = [
        host(f"{prefix}-h-{i}", prefix).model_copy(
            update={"last_heartbeat": None, "aggregates": []}
        )
        for i in range(n)
    ]
    running = [
        Instance(id=f"{prefix}-old-{i}", host=hosts[i % n].name, flavor="p4")
        for i in range(instances)
    ]
    return Fleet(flavors=FLAVORS, hosts=hosts, instances=running)


@dataclass
class CloudEnv:
    store: Store
    app: FastAPI
    client: TestClient
    token: str
    clouds_made: dict[str, SimulatedCloud] = field(default_factory=dict)

    @property
    def clouds(self) -> CloudService:
        svc: CloudService = self.app.state.clouds
        return svc

    def h(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str) -> Any:
        return self.client.get(path, headers=self.h())

    def post(self, path: str, body: object = None) -> Any:
        return self.client.post(path, json=body, headers=self.h())

    def delete(self, path: str) -> Any:
        return self.client.delete(path, headers=self.h())

    def join(
        self, name: str, fleet: Fleet, region: str = "r1", boot_seconds: float = 0.0
    ) -> SimulatedCloud:
        """Join a new simulated cloud `name`; the cloud itself."""
        cloud_name = f"sim-{name}-{next(_names)}"
        r = self.post(
            "/v1/clusters",
            {
                "name": name,
                "region": region,
                "driver": {
                    "kind": "simulated",
                    "config": {
                        "cloud": cloud_name,
                        "fleet": fleet.model_dump(mode="json"),
                        "boot_seconds": boot_seconds,
                    },
                },
            },
        )
        assert r.status_code == 201, r.text
        driver = self.clouds.registry.get(name)
        assert isinstance(driver, SimulatedCloud)
        self.clouds_made[name] = driver
        return driver

    def place(self, cluster: str, count: int = 1, flavor: str = "p4", **kw: Any) -> Any:
        return self.post(
            "/v1/placements", {"flavor": flavor, "count": count, "cluster": cluster, **kw}
        )

    def claims(self, cluster: str) -> dict[str, str]:
        """Berth's claims in `cluster`: instance id -> host."""
        return {
            r.id: r.host
            for r in self.store.list_instances(cluster=cluster, limit=100_000)
            if "@" not in r.id
        }

    def close(self) -> None:
        self.client.__exit__(None, None, None)
        self.store.close()


def servers(cloud: SimulatedCloud) -> dict[str, str]:
    """The cloud's live servers: name -> host."""
    return {s.name: s.host for s in cloud.servers() if s.state.value != "error" and s.host}


def make_cloud_env(
    url: str,
    *,
    grace: float = 0.0,
    replica: str = "r1",
    build_timeout: float = 600.0,
    policy: Policy | None = None,
) -> CloudEnv:
    store = Store.open(url, replica=replica)
    if "r1" not in {r["name"] for r in store.list_regions()}:
        store.add_region("r1")
    config = ServiceConfig(
        db_url=str(store.engine.url),
        replica_id=replica,
        token_cache_ttl=0.0,
        cloud_boot_grace=grace,
        cloud_build_timeout=build_timeout,
        policy=policy,
    )
    app = create_app(config, store=store, background=False)
    token = store.create_token("admin", "admin")[1]
    client = TestClient(app)
    client.__enter__()
    return CloudEnv(store, app, client, token)
