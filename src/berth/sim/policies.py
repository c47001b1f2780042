"""Placement policies to compare: named scheduler profiles, or a user's configuration file.

Built-in names (all `berth.core.config.PROFILES`):

* ``nova``: Nova's default, spread by free RAM (RAMWeigher +1; soft (anti-)affinity).
* ``first_fit``: the first host in fleet order that fits.
* ``best_fit``: the host left fullest (least free CPU + memory share after placing).
* ``worst_fit``: the host left emptiest.
* ``berth``: Berth's default, fragmentation-aware (keeps room for the large flavors), then pack;
  a request that fits nowhere is admitted by one live migration when one makes room
  (`berth.core.defrag.admit`), before any preemptible instance is evicted.
* ``berth-placement``: the same weighers without migrations (placement alone).
* ``spread`` / ``pack`` and any profile added to PROFILES.

A path to a YAML or JSON file is read as a `SchedulerConfig` (docs/scheduling.md); the policy is
named after the file's stem. The file may also set ``admission_migrations`` (0-4, default 0),
which is the simulator's and not part of the scheduler configuration.

Lean filters. The core's default list has 18 filters; most cannot reject anything in a given
replay (no images, no PCI, ...), yet each costs a pass over the fleet per decision. For the
named profiles (and files that do not list `filters`) the simulator keeps the default order but
drops every filter and weigher whose `applies` says it cannot matter for this trace and fleet
(the `Workload`: the flavors used, zones when the trace has them, no images, no hints):
request-dependent filters whose inputs the trace never uses (images, PCI, traits, hints, zones,
groups), the compute filter when every host is enabled and fresh at the start, and the
soft-affinity weighers when no soft group exists (their values are all zero). Such decisions
are the same as with the full list; only the time differs. One real difference: the workload
leaves out operational caps, so `num_instances` (50 instances per host, not a resource) is
dropped too and traces are replayed on resources alone; list `filters` in a policy file to keep
it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from pydantic import ValidationError

from berth.core.config import DEFAULT_FILTERS, PROFILES, SchedulerConfig
from berth.core.defrag.admit import MAX_ADMISSION
from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.core.filters.base import Workload
from berth.core.registry import filter_class, weigher_class
from berth.core.table import HostTable
from berth.fleet.io import describe_validation_error
from berth.sim.defrag import PeriodicDefrag
from berth.sim.types import PeriodicAction

DESCRIPTIONS = {
    "nova": "Nova default: spread by free RAM",
    "first_fit": "first fit (fleet order)",
    "best_fit": "best fit (least CPU+RAM share left)",
    "worst_fit": "worst fit (most CPU+RAM share left)",
    "berth": (
        "Berth default: fragmentation-aware, then pack; admits by one migration; "
        "defragments every 6h (1%) under pressure"
    ),
    "berth-placement": "Berth's placement alone (no migrations)",
    "spread": "spread by free RAM and vCPU",
    "pack": "pack by free RAM and vCPU",
}

ALIASES = {"first-fit": "first_fit", "best-fit": "best_fit", "worst-fit": "worst_fit"}

CLASSIC = ("nova", "first_fit", "best_fit", "worst_fit")
"""The classic policies Berth's default is compared with."""

PLACEMENT_ONLY = "berth-placement"
"""Berth's weighers without admission by migration: placement alone, for comparisons."""

ADMISSION = {"berth": 1}
"""Live migrations a built-in policy may make to admit one request that fits nowhere."""

BERTH_DEFRAG = PeriodicDefrag(interval=6 * 3600.0, share=0.01, on_pressure=True)
"""Berth's defragmenter: every 6 h of trace time, at most 1 % of the running VMs, and only when
some request since the last run found no room (refused, or admitted by migration)."""

OWN_PERIODIC: dict[str, tuple[PeriodicDefrag, ...]] = {"berth": (BERTH_DEFRAG,)}


class PolicyError(BerthError):
    """An unknown policy name or an invalid policy file."""


@dataclass(frozen=True)
class Policy:
    name: str
    config: SchedulerConfig
    description: str
    lean: bool = True
    """True when the simulator may drop filters/weighers that cannot change a decision."""
    admission_migrations: int = 0
    """At most this many live migrations to admit a request that fits nowhere (0: never);
    `berth.core.defrag.admit`, tried before any eviction."""
    periodic: tuple[PeriodicAction, ...] = ()
    """Periodic actions that are part of the policy (Berth's default: its defragmenter)."""


def resolve(spec: str) -> Policy:
    """A policy from a profile name or a configuration file path."""
    name = ALIASES.get(spec.strip(), spec.strip())
    if name == PLACEMENT_ONLY:
        return Policy(
            name=name,
            config=SchedulerConfig(weighers=list(PROFILES["berth"])),
            description=DESCRIPTIONS[name],
        )
    if name in PROFILES:
        return Policy(
            name=name,
            config=SchedulerConfig(weighers=list(PROFILES[name])),
            description=DESCRIPTIONS.get(name, f"profile {name}"),
            admission_migrations=ADMISSION.get(name, 0),
            periodic=OWN_PERIODIC.get(name, ()),
        )
    path = Path(spec)
    if not path.exists():
        raise PolicyError(
            f"unknown policy {spec!r}: not a profile ({', '.join(PROFILES)}) and not a file"
        )
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc})") from None
    raw = dict(raw or {}) if isinstance(raw, dict) else raw
    admission = 0
    if isinstance(raw, dict) and "admission_migrations" in raw:
        admission = _admission(raw.pop("admission_migrations"), f"{path}: admission_migrations")
    try:
        config = SchedulerConfig.model_validate(raw or {})
    except ValidationError as exc:
        raise PolicyError(f"{path}: {describe_validation_error(exc)}") from None
    FilterScheduler.from_config(config)  # unknown plugins and bad params fail here, clearly
    return Policy(
        name=path.stem,
        config=config,
        description=f"user profile {path.name}",
        lean="filters" not in config.model_fields_set,
        admission_migrations=admission,
    )


def _admission(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ADMISSION:
        raise PolicyError(
            f"{where}: must be a whole number of migrations from 0 to {MAX_ADMISSION}, "
            f"got {value!r}"
        )
    return value


def with_admission(policy: Policy, migrations: int) -> Policy:
    """The policy admitting by up to `migrations` live migrations (0: never); the name says so
    when it differs from the policy's own setting."""
    _admission(migrations, "--admit-migrations")
    if migrations == policy.admission_migrations:
        return policy
    suffix = f"+admit{migrations}" if migrations else "-noadmit"
    return replace(policy, name=policy.name + suffix, admission_migrations=migrations)


def resolve_all(specs: Iterable[str]) -> list[Policy]:
    out: list[Policy] = []
    for spec in specs:
        if not spec.strip():
            continue
        policy = resolve(spec)
        if any(p.name == policy.name for p in out):
            raise PolicyError(f"policy {policy.name!r} is listed twice")
        out.append(policy)
    if not out:
        raise PolicyError("no policy given")
    return out


def lean_config(
    policy: Policy, table: HostTable, flavors: Sequence[str], zoned: bool, now: float
) -> SchedulerConfig:
    """The policy's configuration with no-op filters and weighers removed (see module doc)."""
    if not policy.lean:
        return policy.config
    work = Workload(
        table,
        [table.flavors[f] for f in flavors],
        now,
        zones=zoned,
        images=False,
        hints=False,
        instance_caps=False,
    )
    base = policy.config.filters if "filters" in policy.config.model_fields_set else DEFAULT_FILTERS
    filters = [f for f in base if filter_class(f).applies(work)]
    weighers = [w for w in policy.config.weighers if weigher_class(w.name).applies(work)]
    params = {k: v for k, v in policy.config.filter_params.items() if k in filters}
    return policy.config.model_copy(
        update={"filters": filters, "weighers": weighers, "filter_params": params}
    )
