"""Reading policy and topology files (the I/O edge of `berth.policy`).

YAML, or JSON by the `.json` suffix. Every error names the file and the field path, e.g.
`policy.yaml: business.on-demand.variants[2]: unknown variant 'numa3'`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from berth.core.errors import BerthError
from berth.fleet.io import describe_validation_error
from berth.policy.model import Policy, TopologySpec

M = TypeVar("M", bound=BaseModel)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when PyYAML has it (4x faster on the demo topology), same results."""


class PolicyFileError(BerthError):
    """A policy or topology file cannot be read or is invalid (names the file and field)."""


def _read(path: str | Path, what: str) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyFileError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.load(text, Loader=_Loader)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if p.suffix == ".json" else "YAML"
        first = str(exc).splitlines()[0] if str(exc) else kind
        raise PolicyFileError(f"{p}: not valid {kind}: {first}") from None
    if not isinstance(data, dict):
        raise PolicyFileError(f"{p}: expected a mapping ({what})")
    return data


def parse(model: type[M], data: Any, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise PolicyFileError(f"{source}: {describe_validation_error(exc)}") from None


def load_policy(path: str | Path) -> Policy:
    return parse(Policy, _read(path, "pools, families, flavors, variants, business"), str(path))


def load_topology(path: str | Path) -> TopologySpec:
    return parse(TopologySpec, _read(path, "regions with IDCs and clusters"), str(path))


def dump(model: BaseModel, path: str | Path) -> None:
    Path(path).write_text(dump_text(model, json_format=Path(path).suffix == ".json"), "utf-8")


def dump_text(model: BaseModel, *, json_format: bool = False) -> str:
    data = model.model_dump(mode="json", exclude_defaults=True)
    if json_format:
        return json.dumps(data, indent=1) + "\n"
    return yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)
