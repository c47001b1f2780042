"""The elastic control loop's configuration file (`berth serve --elastic FILE`): which batch
queues it watches, which clouds it boots in, and its timings (docs/elastic.md, "Running the
loop in `berth serve`").

```yaml
cycle_seconds: 60            # between control cycles
agent_url: https://berth.example:8080   # where the VMs' agents reach Berth (default: serve's)
watchers:                    # at least one; each watches the groups of its batch system
  - kind: htcondor
    collector: cm.example:9618
  - kind: slurm
    env: {SLURM_CONF: /etc/slurm/slurm.conf}
clouds:                      # at least one
  - cluster: os1             # an OpenStack (or any) cluster registered with `berth cluster add`
  - cluster: sim1            # a simulated cloud, joined at start when missing (demos, tests)
    simulated: {fleet: fleet.yaml, region: region-1}
controller: {keep_alive: 120, hysteresis: 300, boot_deadline: 300}
tidal: {days: 7, margin: 0.2, max_migrations: 8}   # optional: power management of the hosts
```

Every field is checked when the file is read; an error names the file and the field
(`elastic.yaml: watchers[0].collector: Field required`). Nothing starts on a bad file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from berth.elastic.state import ControllerConfig
from berth.elastic.tidal import TidalConfig
from berth.fleet.io import describe_validation_error

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


class ElasticConfigError(ValueError):
    """The file is unreadable or a field is wrong; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HTCondorWatcherSettings(_Strict):
    kind: Literal["htcondor"]
    collector: str = Field(min_length=1, description="the pool's collector, host:port")
    stale_after: Annotated[float, Field(gt=0)] = 20.0


class SlurmWatcherSettings(_Strict):
    kind: Literal["slurm"]
    env: dict[str, str] = Field(default_factory=dict, description="e.g. SLURM_CONF")


WatcherSettings = Annotated[
    HTCondorWatcherSettings | SlurmWatcherSettings, Field(discriminator="kind")
]


class SimulatedSettings(_Strict):
    fleet: str = Field(min_length=1, description="a fleet snapshot file (YAML or JSON)")
    region: str = Field("region-1", min_length=1)
    boot_seconds: Seconds = 0.0


class CloudSettings(_Strict):
    cluster: str = Field(min_length=1)
    simulated: SimulatedSettings | None = None


class ControllerSettings(_Strict):
    keep_alive: Seconds = ControllerConfig.keep_alive
    hysteresis: Seconds = ControllerConfig.hysteresis
    boot_deadline: Seconds = ControllerConfig.boot_deadline
    heartbeat_stale: Seconds = ControllerConfig.heartbeat_stale
    drain_deadline: Seconds = ControllerConfig.drain_deadline
    evict_deadline: Seconds = ControllerConfig.evict_deadline
    backoff_base: Seconds = ControllerConfig.backoff_base
    backoff_max: Seconds = ControllerConfig.backoff_max
    max_starts: Count = ControllerConfig.max_starts
    max_starts_per_group: Count = ControllerConfig.max_starts_per_group
    max_drains: Count = ControllerConfig.max_drains

    def build(self) -> ControllerConfig:
        return ControllerConfig(**self.model_dump())


class TidalSettings(_Strict):
    days: Count = TidalConfig.days
    lookahead: Seconds = TidalConfig.lookahead
    quantile: Annotated[float, Field(ge=0, le=1)] = TidalConfig.quantile
    margin: Seconds = TidalConfig.margin
    spare: Seconds = TidalConfig.spare
    min_on: Count = TidalConfig.min_on
    min_dwell: Seconds = TidalConfig.min_dwell
    max_off: Count = TidalConfig.max_off
    max_on: Count = TidalConfig.max_on
    max_migrations: Count = TidalConfig.max_migrations
    max_concurrent: Annotated[int, Field(ge=1)] = TidalConfig.max_concurrent
    refused_wait: Seconds = TidalConfig.refused_wait

    def build(self) -> TidalConfig:
        return TidalConfig(**self.model_dump())


class ElasticSettings(_Strict):
    cycle_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 60.0
    agent_url: str | None = None
    project: str = Field("elastic", min_length=1)
    shutdown_grace: Seconds = 30.0
    drain_settle: Seconds = 10.0
    watchers: list[WatcherSettings] = Field(min_length=1)
    clouds: list[CloudSettings] = Field(min_length=1)
    controller: ControllerSettings = ControllerSettings()
    tidal: TidalSettings | None = None

    @model_validator(mode="after")
    def _unique(self) -> ElasticSettings:
        names = [c.cluster for c in self.clouds]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"clouds[{i}].cluster: {name!r} is listed twice")
        kinds = [w.kind for w in self.watchers]
        for i, kind in enumerate(kinds):
            if kind in kinds[:i]:
                raise ValueError(f"watchers[{i}].kind: a second {kind} watcher")
        return self


def parse_elastic_settings(data: Any, source: str = "elastic") -> ElasticSettings:
    if not isinstance(data, dict):
        raise ElasticConfigError(f"{source}: expected a mapping with watchers and clouds")
    try:
        return ElasticSettings.model_validate(data)
    except ValidationError as exc:
        raise ElasticConfigError(f"{source}: {describe_validation_error(exc)}") from None


def load_elastic_settings(path: str | Path) -> ElasticSettings:
    """Read and check the file; a simulated cloud's relative fleet path is taken from the
    file's directory."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ElasticConfigError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax"
        raise ElasticConfigError(
            f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {first}"
        ) from None
    settings = parse_elastic_settings(data, str(p))
    clouds = []
    for c in settings.clouds:
        if c.simulated is not None and not Path(c.simulated.fleet).is_absolute():
            fleet = str(p.parent / c.simulated.fleet)
            c = c.model_copy(update={"simulated": c.simulated.model_copy(update={"fleet": fleet})})
        clouds.append(c)
    return settings.model_copy(update={"clouds": clouds})
