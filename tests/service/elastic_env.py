"""A service over a small fleet (tests/store/fleets.py) with a simulated cloud of the same hosts,
for the elastic pools' API and loop tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from berth.cloud.simulated import ServerHook, SimulatedCloud
from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector
from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.demo import load_fleet_into
from berth.service.elastic.loop import ElasticLoop
from berth.service.elastic.metrics import ElasticMetrics
from berth.service.replica import Replica
from berth.store.repo import Store
from tests.store.fleets import NOW, small_fleet


@dataclass
class ElasticEnv:
    app: FastAPI
    client: TestClient
    store: Store
    replica: Replica
    cloud: SimulatedCloud
    tokens: dict[str, str] = field(default_factory=dict)

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.get(who, who)}"}

    def get(self, path: str, who: str = "admin", **kw: Any) -> Any:
        return self.client.get(path, headers=self.h(who), **kw)

    def post(self, path: str, body: object = None, who: str = "admin") -> Any:
        return self.client.post(path, json=body, headers=self.h(who))

    def put(self, path: str, body: object = None, who: str = "admin") -> Any:
        return self.client.put(path, json=body, headers=self.h(who))

    def delete(self, path: str, who: str = "admin") -> Any:
        return self.client.delete(path, headers=self.h(who))


def htcondor_group(name: str, **kw: Any) -> GroupSpec:
    base: dict[str, Any] = {
        "name": name,
        "flavor": "p4",
        "cores_per_vm": 4,
        "slots_per_vm": 4,
        "queue": QueueSelector(BatchSystem.HTCONDOR, accounting_group=f"group_{name}"),
        "max_vms": 4,
    }
    base.update(kw)
    return GroupSpec(**base)


def make_elastic_env(
    db_path: Path | str,
    *,
    clock: Callable[[], float] = lambda: NOW,
    hosts: int = 2,
    on_boot: ServerHook | None = None,
    on_delete: ServerHook | None = None,
    loop: Callable[[Replica, ElasticMetrics, SimulatedCloud], ElasticLoop] | None = None,
    background: bool = False,
) -> ElasticEnv:
    url = db_path if isinstance(db_path, str) else f"sqlite:///{db_path}"
    store = Store.open(url, replica="r1")
    fleet = small_fleet(hosts)
    if not store.list_clusters():
        load_fleet_into(store, fleet, {"c1": "r1"}, now=clock())  # heartbeats as of the clock
    config = ServiceConfig(db_url=url, token_cache_ttl=0.0, service_down_time=1e10)
    cloud = SimulatedCloud("c1", fleet, clock=clock, on_boot=on_boot, on_delete=on_delete)
    factory = None if loop is None else (lambda r, m, _clouds: loop(r, m, cloud))
    app = create_app(config, store=store, clock=clock, background=background, elastic_loop=factory)
    tokens = {
        "admin": store.create_token("admin", "admin")[1],
        "operator": store.create_token("op", "operator")[1],
        "reader": store.create_token("ro", "reader")[1],
        "tenant": store.create_token("t", "tenant", "p1")[1],
    }
    return ElasticEnv(app, TestClient(app), store, app.state.replica, cloud, tokens)
