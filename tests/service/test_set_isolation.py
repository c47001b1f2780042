"""Deployment sets are per project (docs/service.md, "Deployment sets"): projects A and B may
each have a set `web`; they are two sets with their own rules, and to a tenant another project's
set is exactly a missing one, in every route. Through the real app, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.demo import load_fleet_into
from berth.store.audit import audit
from berth.store.db import current_revision, make_engine, upgrade
from berth.store.repo import Store
from tests.service.conftest import Env, db_url, pg_url
from tests.store.dbs import fresh_pg_database
from tests.store.fleets import NOW, small_fleet

__all__ = ["db_url", "pg_url"]

HOSTS = 6  # three hosts in each of clusters c1 and c2
FLAVOR = "p4"  # four fit a host


def _env(url: str, replica_id: str, tokens: dict[str, str] | None = None) -> Env:
    store = Store.open(url, replica=replica_id)
    config = ServiceConfig(db_url=url, replica_id=replica_id, token_cache_ttl=0)
    app = create_app(config, store=store, clock=lambda: NOW, background=False)
    if tokens is None:
        tokens = {
            "admin": store.create_token("admin", "admin")[1],
            "alpha": store.create_token("alpha", "tenant", "project-1")[1],
            "beta": store.create_token("beta", "tenant", "project-2")[1],
        }
    return Env(app, TestClient(app), store, app.state.replica, tokens)


@pytest.fixture
def iso(db_url: str) -> Iterator[Env]:
    seed = Store.open(db_url, replica="loader")
    load_fleet_into(seed, small_fleet(3, ("c1", "c2")), {"c1": "r1", "c2": "r1"}, now=NOW)
    seed.close()
    env = _env(db_url, "r1")
    yield env
    env.client.close()
    env.store.close()


def _error(resp: Any) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


def _same(a: Any, b: Any) -> None:
    """Two answers that must not tell another project's set from a missing one."""
    assert a.status_code == b.status_code, (a.text, b.text)
    if a.status_code >= 400:
        ea, eb = _error(a), _error(b)
        assert (ea["code"], ea["field"], ea["details"]) == (eb["code"], eb["field"], eb["details"])
    else:
        assert a.json() == b.json()


def _place(env: Env, who: str, **body: Any) -> Any:
    return env.post("/v1/placements", {"flavor": FLAVOR, "count": 1, **body}, who)


def _hosts(env: Env, who: str, set_id: str) -> list[str]:
    rows = env.get("/v1/instances", who, params={"deployment_set": set_id}).json()
    return [r["host"] for r in rows]


def test_two_projects_sets_of_one_id_are_two_sets(iso: Env) -> None:
    a = iso.post("/v1/deployment-sets", {"id": "web", "max_size": 2}, "alpha")
    assert a.status_code == 201, a.text
    b = iso.post("/v1/deployment-sets", {"id": "web", "policy": "affinity"}, "beta")
    assert b.status_code == 201, b.text  # not 409: alpha's set is none of beta's business
    again = iso.post("/v1/deployment-sets", {"id": "web"}, "alpha")
    assert again.status_code == 409, again.text  # a project's own ids stay unique
    seen = {who: iso.get("/v1/deployment-sets/web", who).json() for who in ("alpha", "beta")}
    assert (seen["alpha"]["project"], seen["alpha"]["policy"]) == ("project-1", "anti-affinity")
    assert (seen["beta"]["project"], seen["beta"]["policy"]) == ("project-2", "affinity")
    assert [s["project"] for s in iso.get("/v1/deployment-sets", "beta").json()] == ["project-2"]
    # an operator names the project when several have the id
    ambiguous = iso.get("/v1/deployment-sets/web")
    assert ambiguous.status_code == 422, ambiguous.text
    assert _error(ambiguous)["field"] == "project"
    named = iso.get("/v1/deployment-sets/web", params={"project": "project-2"})
    assert named.json()["policy"] == "affinity"
    # a second replica's cache knows them apart too (group_added carries the project)
    other = _env(iso.store.engine.url.render_as_string(hide_password=False), "r2", iso.tokens)
    try:
        other.replica.sync()
        keys = {k for k in other.replica.groups if k.endswith("/web")}
        assert keys == {"default/web", "project-1/web", "project-2/web"}
        assert _place(iso, "alpha", deployment_set="web").status_code == 201
        assert iso.delete("/v1/deployment-sets/web", "beta").status_code == 204
        other.replica.sync()
        assert {k for k in other.replica.groups if k.endswith("/web")} == {
            "default/web",
            "project-1/web",
        }
        assert other.replica.group_members("project-1/web") == 1
    finally:
        other.client.close()
        other.store.close()
    assert iso.get("/v1/deployment-sets/web", "alpha").status_code == 200
    assert iso.get("/v1/deployment-sets/web", "beta").status_code == 404


def test_another_projects_set_is_a_missing_one_in_every_route(iso: Env) -> None:
    made = iso.post("/v1/deployment-sets", {"id": "alpha-only", "policy": "affinity"}, "alpha")
    assert made.status_code == 201, made.text
    placed = _place(iso, "alpha", deployment_set="alpha-only")
    assert placed.status_code == 201, placed.text
    theirs = placed.json()["instances"][0]["id"]
    for hint in ("same_host", "different_host"):  # another project's instance as a hint, too
        _same(_place(iso, "beta", **{hint: [theirs]}), _place(iso, "beta", **{hint: ["i-0"]}))
    foreign, missing = "alpha-only", "never-made"
    _same(
        iso.get(f"/v1/deployment-sets/{foreign}", "beta"),
        iso.get(f"/v1/deployment-sets/{missing}", "beta"),
    )
    _same(
        iso.get(f"/v1/deployment-sets/{foreign}", "beta", params={"project": "project-1"}),
        iso.get(f"/v1/deployment-sets/{missing}", "beta", params={"project": "project-1"}),
    )
    _same(
        iso.get("/v1/deployment-sets", "beta", params={"project": "project-1"}),
        iso.get("/v1/deployment-sets", "beta", params={"project": "project-9"}),
    )
    _same(_place(iso, "beta", deployment_set=foreign), _place(iso, "beta", deployment_set=missing))
    _same(
        iso.get("/v1/instances", "beta", params={"deployment_set": foreign}),
        iso.get("/v1/instances", "beta", params={"deployment_set": missing}),
    )
    for set_id in (foreign, missing):  # delete last: both must still be "missing" to beta
        assert iso.delete(f"/v1/deployment-sets/{set_id}", "beta").status_code == 404
    # creating one of the same id is creating beta's own set, as for a new id
    for set_id in (foreign, missing):
        resp = iso.post("/v1/deployment-sets", {"id": set_id}, "beta")
        assert resp.status_code == 201, resp.text
        assert resp.json()["members"] == 0
    assert iso.get(f"/v1/deployment-sets/{foreign}", "alpha").json()["members"] == 1
    assert audit(iso.store) == []


# (alpha's policy, beta's policy): whatever the pair, neither set constrains the other
PAIRS = [
    ("anti-affinity", "anti-affinity"),
    ("anti-affinity", "affinity"),
    ("affinity", "anti-affinity"),
    ("affinity", "affinity"),
]


@pytest.mark.parametrize(("alpha_policy", "beta_policy"), PAIRS)
def test_same_named_sets_never_constrain_each_other(
    iso: Env, alpha_policy: str, beta_policy: str
) -> None:
    for who, policy in (("alpha", alpha_policy), ("beta", beta_policy)):
        body = {"id": "web", "policy": policy, "max_size": HOSTS}
        assert iso.post("/v1/deployment-sets", body, who).status_code == 201
    # alpha fills its set: anti-affinity one member on each host, affinity all on one host
    homes: dict[str, str] = {}
    for k in range(HOSTS if alpha_policy == "anti-affinity" else 4):
        resp = _place(iso, "alpha", deployment_set="web", seed=k)
        assert resp.status_code == 201, resp.text
    first = _hosts(iso, "alpha", "web")
    homes["alpha"] = first[0]
    if alpha_policy == "anti-affinity":
        assert len(set(first)) == len(first)
        assert len(first) == HOSTS
    else:
        assert set(first) == {homes["alpha"]}  # the host is now full (four p4)
    # beta's set of the same id is untouched by alpha's members: it places as if alone,
    # including on alpha's hosts and in the cluster alpha's affinity set is not in
    other_cluster = "c2" if homes["alpha"].startswith("h-c1") else "c1"
    for k in range(3):
        where: dict[str, Any] = {"deployment_set": "web", "seed": 10 + k}
        if beta_policy == "affinity":
            where["cluster"] = other_cluster
        resp = _place(iso, "beta", **where)
        assert resp.status_code == 201, resp.text
    mine = _hosts(iso, "beta", "web")
    if beta_policy == "anti-affinity":
        assert len(set(mine)) == 3
    else:
        assert len(set(mine)) == 1
        assert mine[0].startswith(f"h-{other_cluster}")
    # each set still holds its own rule and size, counted on its own members only
    full = _place(iso, "alpha", deployment_set="web")
    assert full.status_code == 409, full.text
    beta_set = iso.get("/v1/deployment-sets/web", "beta").json()
    alpha_set = iso.get("/v1/deployment-sets/web", "alpha").json()
    assert (alpha_set["members"], beta_set["members"]) == (len(first), 3)
    assert audit(iso.store) == []


# ---------------------------------------------------------------------------- migration 0005
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_keeps_sets_and_their_members(kind: str, tmp_path: Any, request: Any) -> None:
    """A database written before sets were per project upgrades with every row kept; a set
    that held another project's instances is copied into that project."""
    if kind == "sqlite":
        _migrate_0004_data(f"sqlite:///{tmp_path / 'old.db'}")
        return
    request.getfixturevalue("pg_url")  # skips without PostgreSQL
    with fresh_pg_database() as url:
        _migrate_0004_data(url)


def _migrate_0004_data(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine, "0004")
    rows = [
        "INSERT INTO regions (name, description, created_at) VALUES ('r1', '', 1)",
        "INSERT INTO clusters (name, region, state, created_at, changed_at) "
        "VALUES ('c1', 'r1', 'active', 1, 1)",
        "INSERT INTO hosts (name, cluster, spec, enabled, generation, created_at, draining) "
        "VALUES ('h1', 'c1', '{}', true, 0, 1, false)",
        "INSERT INTO flavors (name, spec, created_at) VALUES ('f', '{}', 1)",
        "INSERT INTO deployment_sets (id, project, policy, max_per_host, generation, "
        "created_at, scope) VALUES ('web', 'default', 'anti-affinity', 1, 7, 1, 'host')",
    ]
    for iid, project in (("i1", "default"), ("i2", "p2")):
        rows.append(
            "INSERT INTO instances (id, project, flavor, host, cluster, server_group, placement, "
            f"business_type, preemptible, migratable, created_at) VALUES ('{iid}', '{project}', "
            "'f', 'h1', 'c1', 'web', '{}', 'on-demand', false, true, 1)"
        )
    with engine.begin() as conn:
        for sql in rows:
            conn.execute(sa.text(sql))
    upgrade(engine)
    assert current_revision(engine) == "0005"
    engine.dispose()
    store = Store.open(url)
    try:
        sets = {(g.project, g.id): g.generation for g in store.list_groups()}
        assert sets == {("default", "web"): 7, ("p2", "web"): 7}
        assert store.group_members("default", "web") == ["i1"]
        assert store.group_members("p2", "web") == ["i2"]
    finally:
        store.close()
