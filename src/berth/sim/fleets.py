"""Fleets for a replay: a fleet snapshot file, or a sizing spec ("N hosts of type X per cluster").

Sizing specs, inline (``--fleet "40xstd-2s+4xdpdk-2s"``): ``COUNT x TYPE`` terms joined by
``+``; the counts are per cluster, and the clusters are the trace's (IDC, cluster) pairs (one
cluster in zone ``nova`` when the trace names none). As a YAML file (``kind: sizing``)::

    kind: sizing
    host_types:                 # optional extra types: Host fields without name/zone
      big-2s:
        numa_cells: [{shared_cpus: 48, memory_mb: 393216}, {shared_cpus: 48, memory_mb: 393216}]
    per_cluster: {std-2s: 100, dpdk-2s: 8}     # N hosts of each type in every cluster
    clusters:                   # optional; default: the trace's clusters
      - {idc: bj-a, name: c1}
      - {idc: bj-a, name: c2, hosts: {std-2s: 40}}   # per-cluster override

Hosts are named ``{idc}-{cluster}-{type}-{n:04d}``, sit in availability zone = IDC and carry a
fresh heartbeat at time 0. Any other YAML/JSON file is read as a fleet snapshot
(docs/fleet-format.md); its hosts, flavors, groups and instances are used as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from berth.core.errors import BerthError
from berth.core.model import Flavor, Fleet, Host, ServerGroup
from berth.fleet.io import describe_validation_error, load_fleet
from berth.sim.hosttypes import HOST_TYPES
from berth.sim.trace import Trace


class FleetSpecError(BerthError):
    """A sizing spec or fleet file is invalid; the message says where."""


_TERM = re.compile(r"^\s*(\d+)\s*[x*]\s*([A-Za-z0-9_.\-]+)\s*$")
MAX_SIZING_HOSTS = 200_000
"""The most hosts a sizing spec may make over all clusters (docs/simulator.md): 20 times the
largest fleet the benchmarks replay, and about 2 GB of memory; a bigger count is a typo."""


@dataclass
class Sizing:
    per_cluster: dict[str, int]
    clusters: list[tuple[str, str, dict[str, int] | None]] = field(default_factory=list)
    host_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    text: str = ""


def parse_sizing(text: str) -> Sizing:
    """Parse an inline sizing spec ``COUNT x TYPE [+ COUNT x TYPE ...]``."""
    spec = text.strip()
    if spec.endswith("per cluster"):
        spec = spec.removesuffix("per cluster")
    counts: dict[str, int] = {}
    for term in spec.split("+"):
        m = _TERM.match(term)
        if m is None:
            raise FleetSpecError(
                f"sizing spec {text!r}: bad term {term.strip()!r} (expected COUNT x TYPE, "
                f"e.g. 40xstd-2s; types: {', '.join(HOST_TYPES)})"
            )
        counts[m.group(2)] = counts.get(m.group(2), 0) + _count(int(m.group(1)), term.strip())
    return Sizing(per_cluster=counts, text=text.strip())


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(value: object, where: str) -> int:
    """A host count: an integer from 0 to `MAX_SIZING_HOSTS` (not a boolean)."""
    if not isinstance(value, int) or not _is_count(value):
        raise FleetSpecError(f"{where}: a host count must be an integer >= 0, got {value!r}")
    if value > MAX_SIZING_HOSTS:
        raise FleetSpecError(
            f"{where}: {value} hosts is more than a sizing spec may make ({MAX_SIZING_HOSTS})"
        )
    return value


def looks_like_sizing(text: str) -> bool:
    return not Path(text).exists() and all(_TERM.match(t) for t in text.split("+"))


def _sizing_from_yaml(data: dict[str, Any], source: str) -> Sizing:
    unknown = set(data) - {"kind", "per_cluster", "clusters", "host_types"}
    if unknown:
        raise FleetSpecError(f"{source}: unknown key {sorted(unknown)[0]!r} in a sizing spec")
    per = data.get("per_cluster") or {}
    if not isinstance(per, dict) or not all(_is_count(v) for v in per.values()):
        raise FleetSpecError(f"{source}: per_cluster must map host type -> count (>= 0)")
    per = {str(k): _count(v, f"{source}: per_cluster.{k}") for k, v in per.items()}
    clusters: list[tuple[str, str, dict[str, int] | None]] = []
    for i, c in enumerate(data.get("clusters") or []):
        if not isinstance(c, dict) or "idc" not in c or "name" not in c:
            raise FleetSpecError(f"{source}: clusters[{i}] needs idc and name")
        hosts = c.get("hosts")
        if hosts is not None and not isinstance(hosts, dict):
            raise FleetSpecError(f"{source}: clusters[{i}].hosts must map host type -> count")
        if hosts is not None:
            hosts = {
                str(k): _count(v, f"{source}: clusters[{i}].hosts.{k}") for k, v in hosts.items()
            }
        clusters.append((str(c["idc"]), str(c["name"]), hosts))
    types = data.get("host_types") or {}
    if not isinstance(types, dict):
        raise FleetSpecError(f"{source}: host_types must map name -> host fields")
    return Sizing(per_cluster=dict(per), clusters=clusters, host_types=dict(types), text=source)


def build_sizing(sizing: Sizing, trace: Trace | None = None) -> list[Host]:
    """The hosts of a sizing spec, cluster by cluster, in a stable order."""
    types = {**HOST_TYPES, **sizing.host_types}
    if sizing.clusters:
        clusters = sizing.clusters
    elif trace is not None and trace.clusters:
        clusters = [(idc, name, None) for idc, name in trace.clusters]
    else:
        clusters = [("nova", "c1", None)]
    total = sum(
        sum((override if override is not None else sizing.per_cluster).values())
        for _, _, override in clusters
    )
    if total > MAX_SIZING_HOSTS:
        raise FleetSpecError(
            f"sizing spec {sizing.text!r}: {total} hosts over {len(clusters)} cluster(s) is more "
            f"than a sizing spec may make ({MAX_SIZING_HOSTS})"
        )
    hosts: list[Host] = []
    for idc, name, override in clusters:
        counts = override if override is not None else sizing.per_cluster
        for tname, count in counts.items():
            if tname not in types:
                raise FleetSpecError(
                    f"sizing spec {sizing.text!r}: unknown host type {tname!r} "
                    f"(known: {', '.join(types)})"
                )
            for n in range(count):
                data = {
                    **types[tname],
                    "name": f"{idc}-{name}-{tname}-{n:04d}",
                    "availability_zone": idc,
                    "last_heartbeat": 0.0,
                }
                try:
                    hosts.append(Host.model_validate(data))
                except ValidationError as exc:
                    raise FleetSpecError(
                        f"host type {tname!r}: {describe_validation_error(exc)}"
                    ) from None
    if not hosts:
        raise FleetSpecError(f"sizing spec {sizing.text!r} gives no hosts")
    return hosts


def load_fleet_or_sizing(spec: str, trace: Trace | None = None) -> tuple[Fleet, str]:
    """A fleet from a snapshot file, a sizing YAML file, or an inline sizing spec.

    Returns the fleet and a one-line description of where it came from.
    """
    path = Path(spec)
    if not path.exists():
        if looks_like_sizing(spec):
            sizing = parse_sizing(spec)
            hosts = build_sizing(sizing, trace)
            return Fleet(hosts=hosts, now=0.0), f"sizing {sizing.text} ({len(hosts)} hosts)"
        raise FleetSpecError(
            f"--fleet {spec!r}: no such file, and not a sizing spec "
            "(COUNT x TYPE, e.g. 400xazure-1)"
        )
    if path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise FleetSpecError(f"{path}: cannot read ({exc})") from None
        if isinstance(data, dict) and data.get("kind") == "sizing":
            sizing = _sizing_from_yaml(data, str(path))
            hosts = build_sizing(sizing, trace)
            return Fleet(hosts=hosts, now=0.0), f"sizing file {path} ({len(hosts)} hosts)"
    fleet = load_fleet(path)
    return fleet, f"fleet file {path} ({len(fleet.hosts)} hosts, {len(fleet.instances)} instances)"


def merge_trace(fleet: Fleet, trace: Trace) -> Fleet:
    """The fleet with the trace's flavors and deployment sets added (names must agree)."""
    flavors: dict[str, Flavor] = {f.name: f for f in fleet.flavors}
    for name in trace.flavor_names:
        mine = trace.flavors.get(name)
        theirs = flavors.get(name)
        if mine is None and theirs is None:
            where = int((trace.flavor == trace.flavor_names.index(name)).argmax())
            first = int(trace.lines[where])
            raise FleetSpecError(
                f"{trace.source or trace.name}:{first}: flavor {name!r} is not defined by the "
                "fleet file (give it there, or use vcpus and memory_mb columns)"
            )
        if mine is not None and theirs is not None and mine != theirs:
            raise FleetSpecError(
                f"flavor {name!r} is defined differently by the trace and the fleet file"
            )
        if theirs is None and mine is not None:
            flavors[name] = mine
    groups: dict[str, ServerGroup] = {g.id: g for g in fleet.server_groups}
    for g in trace.groups:
        if g.id in groups and groups[g.id] != g:
            raise FleetSpecError(f"server group {g.id!r} differs between trace and fleet file")
        groups[g.id] = g
    clash = {i.id for i in fleet.instances} & set(trace.ids)
    if clash:
        raise FleetSpecError(
            f"instance id {sorted(clash)[0]!r} is both in the fleet file and in the trace"
        )
    return fleet.model_copy(
        update={"flavors": list(flavors.values()), "server_groups": list(groups.values())}
    )
