"""The elastic loop's configuration file (`berth serve --elastic FILE`): every field checked,
errors naming the file and the field, defaults equal to the controller's and the tidal
planner's own; the loop built from it watches the store's groups and drives named clusters."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from berth.cli.main import app
from berth.elastic.model import BatchSystem, QueueSelector
from berth.elastic.state import ControllerConfig
from berth.elastic.tidal import TidalConfig
from berth.fleet.io import dump_fleet
from berth.service.elastic.build import GroupWatcher, build_loop, drivers
from berth.service.elastic.settings import (
    ControllerSettings,
    ElasticConfigError,
    ElasticSettings,
    TidalSettings,
    load_elastic_settings,
    parse_elastic_settings,
)
from tests.service.elastic_env import htcondor_group, make_elastic_env
from tests.service.servers import free_port
from tests.store.fleets import small_fleet

GOOD: dict[str, Any] = {
    "watchers": [{"kind": "htcondor", "collector": "cm:9618"}],
    "clouds": [{"cluster": "c1"}],
}


def _with(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"clouds": [{"cluster": "c1"}]}, "watchers: Field required"),
        (_with(watchers=[]), "watchers: List should have at least 1 item"),
        (_with(watchers=[{"kind": "pbs"}]), "watchers[0]"),
        (_with(watchers=[{"kind": "htcondor"}]), "watchers[0].htcondor.collector"),
        (_with(watchers=[{"kind": "slurm", "env": {"SLURM_CONF": 3}}]), "SLURM_CONF"),
        (_with(clouds=[]), "clouds: List should have at least 1 item"),
        (_with(clouds=[{"cluster": "c1"}, {"cluster": "c1"}]), "clouds[1].cluster"),
        (_with(clouds=[{"cluster": "c1", "simulated": {}}]), "clouds[0].simulated.fleet"),
        (_with(cycle_seconds=0), "cycle_seconds"),
        (_with(controller={"keep_alive": -1}), "controller.keep_alive"),
        (_with(controller={"boot_deadline": "soon"}), "controller.boot_deadline"),
        (_with(controller={"keepalive": 5}), "controller.keepalive"),
        (_with(tidal={"quantile": 2}), "tidal.quantile"),
        (_with(colour="blue"), "colour"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_files_name_the_field(data: Any, field: str) -> None:
    with pytest.raises(ElasticConfigError) as exc:
        parse_elastic_settings(data, "elastic.yaml")
    assert str(exc.value).startswith("elastic.yaml: ")
    assert field in str(exc.value)


def test_defaults_are_the_configs_own(tmp_path: Path) -> None:
    assert ControllerSettings().build() == ControllerConfig()
    assert TidalSettings().build() == TidalConfig()
    assert {f.name for f in fields(ControllerConfig)} == set(ControllerSettings.model_fields)
    assert {f.name for f in fields(TidalConfig)} == set(TidalSettings.model_fields)
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(_with(clouds=[{"cluster": "s", "simulated": {"fleet": "f"}}])))
    s = load_elastic_settings(path)
    assert s.cycle_seconds == 60.0
    assert s.tidal is None
    assert s.clouds[0].simulated is not None
    assert s.clouds[0].simulated.fleet == str(tmp_path / "f")  # beside the file
    (tmp_path / "bad.yaml").write_text("watchers: [")
    with pytest.raises(ElasticConfigError, match=r"bad\.yaml: not valid YAML"):
        load_elastic_settings(tmp_path / "bad.yaml")


def test_serve_refuses_a_bad_file_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "elastic.yaml"
    bad.write_text(yaml.safe_dump(_with(controller={"hysteresis": -5})))
    args = ["serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "d")]
    result = CliRunner().invoke(app, [*args, "--elastic", str(bad)])
    assert result.exit_code == 2, result.output
    assert "controller.hysteresis" in result.output
    assert not (tmp_path / "d").exists()  # no database was made


def test_the_loop_watches_the_stores_groups_and_drives_named_clusters(tmp_path: Path) -> None:
    env = make_elastic_env(tmp_path / "berth.db")
    clouds = env.app.state.clouds
    metrics = env.app.state.elastic_metrics
    try:
        unknown = parse_elastic_settings(GOOD)
        with pytest.raises(
            ElasticConfigError, match=r"clouds\[0\]\.cluster: 'c1' is not a cluster"
        ):
            drivers(unknown, clouds)  # c1 is in the topology but no driver drives it
        dump_fleet(small_fleet(2, zones=("s1",)), tmp_path / "fleet.yaml")
        sim = {"fleet": str(tmp_path / "fleet.yaml"), "region": "r-sim"}
        settings = parse_elastic_settings(_with(clouds=[{"cluster": "s1", "simulated": sim}]))
        loop = build_loop(settings, env.replica, metrics, clouds, "http://berth:8080")
        assert list(loop.drivers) == ["s1"]
        assert clouds.cloud_of("s1") is not None  # joined once; a restart finds it
        assert {h.cluster for h in env.store.list_hosts()} == {"c1", "s1"}
        assert loop.config.agent_url == "http://berth:8080"
        assert loop.config.interval == 60.0
        assert drivers(settings, clouds)["s1"] is loop.drivers["s1"]
        watcher = loop.watchers[0]
        assert isinstance(watcher, GroupWatcher)
        env.store.put_elastic_group(htcondor_group("juno"))
        slurm = QueueSelector(BatchSystem.SLURM, partition="bes", account="bes")
        env.store.put_elastic_group(htcondor_group("bes", queue=slurm))
        env.store.put_elastic_group(
            htcondor_group("odd", queue=QueueSelector(BatchSystem.HTCONDOR))
        )
        assert watcher.groups() == {"juno": htcondor_group("juno").queue}  # its system, usable
        bad_fleet = parse_elastic_settings(
            _with(clouds=[{"cluster": "s2", "simulated": {"fleet": str(tmp_path / "none")}}])
        )
        with pytest.raises(ElasticConfigError, match=r"clouds\[0\]\.simulated\.fleet"):
            drivers(bad_fleet, clouds)
        assert isinstance(settings, ElasticSettings)
    finally:
        env.store.close()
