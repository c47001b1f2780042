"""Reading and writing fleet snapshot files (YAML or JSON), with errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from berth.core.errors import BerthError
from berth.core.model import Fleet, GroupPolicy


class FleetFileError(BerthError):
    """A fleet file cannot be read or is invalid; the message names the file and the field."""


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def describe_validation_error(exc: ValidationError, limit: int = 3) -> str:
    lines = []
    for err in exc.errors()[:limit]:
        loc = _location(tuple(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}")
    more = len(exc.errors()) - limit
    if more > 0:
        lines.append(f"... and {more} more")
    return "; ".join(lines)


def parse_fleet(data: Any, source: str = "fleet") -> Fleet:
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise FleetFileError(f"{source}: {describe_validation_error(exc)}") from None


def check_server_groups(fleet: Fleet, source: str = "fleet") -> None:
    """Raise `FleetFileError` when the instances break a hard server-group policy: more
    anti-affinity members on a host than `max_server_per_host`, or affinity members on two
    hosts. Loading keeps such a snapshot (a real cloud can be in that state); `berth validate`
    reports it (docs/fleet-format.md)."""
    policies = {g.id: g for g in fleet.server_groups}
    on_host: dict[tuple[str, str], int] = {}
    first_host: dict[str, str] = {}
    for i, inst in enumerate(fleet.instances):
        group = policies.get(inst.server_group or "")
        if group is None:
            continue
        where = f"{source}: instances[{i}].host"
        if group.policy == GroupPolicy.ANTI_AFFINITY:
            n = on_host[(group.id, inst.host)] = on_host.get((group.id, inst.host), 0) + 1
            if n > group.max_server_per_host:
                raise FleetFileError(
                    f"{where}: {n} members of anti-affinity server group {group.id!r} on host "
                    f"{inst.host!r} (at most {group.max_server_per_host})"
                )
        elif group.policy == GroupPolicy.AFFINITY:
            other = first_host.setdefault(group.id, inst.host)
            if other != inst.host:
                raise FleetFileError(
                    f"{where}: affinity server group {group.id!r} has members on hosts "
                    f"{other!r} and {inst.host!r}"
                )


def load_fleet(path: str | Path) -> Fleet:
    """Load and validate a snapshot; `.json` files as JSON, anything else as YAML."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise FleetFileError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise FleetFileError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise FleetFileError(
            f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise FleetFileError(f"{p}: expected a mapping with hosts, flavors and instances")
    return parse_fleet(data, str(p))


def dump_fleet(fleet: Fleet, path: str | Path) -> None:
    data = fleet.model_dump(mode="json", exclude_defaults=True)
    p = Path(path)
    if p.suffix == ".json":
        p.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    else:
        p.write_text(yaml.safe_dump(data, sort_keys=False, width=100), encoding="utf-8")
