"""The scheduler a command uses: a named profile, or a configuration file that overrides it.

Shared by `berth place`, `berth capacity` and `berth defrag plan`, so that one configuration
(say, rack-scoped deployment sets) reaches the online scheduler and the offline planner alike.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from berth.core.config import SchedulerConfig, profile
from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.fleet.io import describe_validation_error


def load_scheduler(profile_name: str, config_path: Path | None) -> FilterScheduler:
    """The scheduler of `config_path` (YAML) when given, else of the named profile.

    Raises `BerthError` with one line naming the file (or `--profile`) and what is wrong."""
    if config_path is None:
        try:
            return FilterScheduler.from_config(profile(profile_name))
        except BerthError as exc:
            message = str(exc).replace("unknown profile", "--profile: unknown profile")
            raise BerthError(message) from None
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise BerthError(f"{config_path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise BerthError(f"{config_path}: not valid YAML: {exc}") from None
    try:
        config = SchedulerConfig.model_validate(raw)
    except ValidationError as exc:
        raise BerthError(f"{config_path}: {describe_validation_error(exc)}") from None
    return FilterScheduler.from_config(config)
