"""The generic trace format operators bring their own traces in: CSV (with a header) or JSONL.

One row (CSV line or JSON object per line) per VM request, sorted by `start`:

=============  ========  =====================================================================
column         required  meaning
=============  ========  =====================================================================
id             yes       unique instance id
start          yes       creation time, seconds (negative = already running at time 0)
end            no        deletion time, seconds; empty or ``inf`` = never (must be >= start)
flavor         one of    a flavor name (defined in the fleet file), or ...
vcpus          ... or    ... an inline size: ``vcpus`` and ``memory_mb`` (and optionally
memory_mb                ``disk_gb``) make a flavor named ``v{vcpus}-m{memory_mb}[-d{disk}]``;
                         with ``flavor`` too, they define that name (same size on every row)
business       no        on-demand (default), auto-scaling or preemptible
priority       no        0 = regular, 1 = low (preemptible) when `business` is absent
zone           no        availability zone (IDC) the request must land in
group          no        deployment set: members never share a host (strict anti-affinity)
=============  ========  =====================================================================

Any problem is one `TraceError` naming the file and the line (the header is line 1 of a CSV).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from berth.core.model import Flavor, GroupPolicy, ServerGroup
from berth.sim.trace import Business, Trace, TraceError

REQUIRED = ("id", "start")
KNOWN = (
    "id",
    "start",
    "end",
    "flavor",
    "vcpus",
    "memory_mb",
    "disk_gb",
    "business",
    "priority",
    "zone",
    "group",
)


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def _rows(path: Path, stream: IO[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) pairs; CSV rows are strings, JSONL rows whatever JSON gives."""
    jsonl = ".jsonl" in path.suffixes or ".ndjson" in path.suffixes
    if jsonl:
        for lineno, text in enumerate(stream, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}:{lineno}: expected a JSON object per line")
            missing = [c for c in REQUIRED if c not in obj]
            if missing:
                raise TraceError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
            yield lineno, obj
        return
    reader = csv.reader(stream)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{path}:1: empty file (expected a header line)") from None
    except csv.Error as exc:
        raise TraceError(f"{path}:1: {exc}") from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if "flavor" not in header and not {"vcpus", "memory_mb"} <= set(header):
        missing.append("flavor (or vcpus and memory_mb)")
    if missing:
        raise TraceError(
            f"{path}:1: missing column(s) {', '.join(missing)}; the header has {', '.join(header)}"
        )
    try:
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(
                    f"{path}:{lineno}: {len(row)} fields, the header has {len(header)}"
                )
            yield lineno, dict(zip(header, row, strict=True))
    except csv.Error as exc:
        raise TraceError(f"{path}:{reader.line_num}: {exc}") from None


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None


def _size(value: Any, what: str) -> int:
    x = _number(value, what)
    if x < 0:
        raise ValueError(f"{what} must not be negative, got {x:g}")
    if not math.isfinite(x) or x != int(x):
        raise ValueError(f"{what} must be a whole number, got {x:g}")
    return int(x)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def read_trace(path: str | Path) -> Trace:
    """Read a generic trace file (`.csv`, `.jsonl`, optionally `.gz`)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    ids: list[str] = []
    start: list[float] = []
    end: list[float] = []
    flavor: list[int] = []
    business: list[int] = []
    zone: list[int] = []
    group: list[int] = []
    lines: list[int] = []
    flavor_index: dict[str, int] = {}
    flavors: dict[str, Flavor] = {}
    zones: dict[str, int] = {}
    groups: dict[str, int] = {}
    seen: dict[str, int] = {}
    last = -math.inf
    try:
        stream = _open(p)
    except OSError as exc:
        raise TraceError(f"{p}: cannot read ({exc.strerror})") from None
    with stream:
        try:
            for lineno, row in _rows(p, stream):
                try:
                    rid = str(row["id"]).strip()
                    if not rid:
                        raise ValueError("id is empty")
                    if rid in seen:
                        raise ValueError(f"duplicate id {rid!r} (first on line {seen[rid]})")
                    t0 = _number(row["start"], "start")
                    if math.isnan(t0) or math.isinf(t0):
                        raise ValueError(f"start must be finite, got {t0}")
                    raw_end = row.get("end")
                    t1 = math.inf if _blank(raw_end) else _number(raw_end, "end")
                    if math.isnan(t1) or t1 < t0:
                        raise ValueError(f"end {t1:g} is before start {t0:g}")
                    if t0 < last:
                        raise ValueError(
                            f"start {t0:g} is before the previous row's start {last:g} "
                            "(rows must be sorted by start time)"
                        )
                    name = _flavor_of(row, flavors)
                    biz = _business_of(row)
                except (ValueError, TypeError) as exc:
                    raise TraceError(f"{p}:{lineno}: {exc}") from None
                last = t0
                seen[rid] = lineno
                ids.append(rid)
                start.append(t0)
                end.append(t1)
                flavor.append(flavor_index.setdefault(name, len(flavor_index)))
                business.append(int(biz))
                z = row.get("zone")
                zone.append(-1 if _blank(z) else zones.setdefault(str(z).strip(), len(zones)))
                g = row.get("group")
                group.append(-1 if _blank(g) else groups.setdefault(str(g).strip(), len(groups)))
                lines.append(lineno)
        except UnicodeDecodeError as exc:
            raise TraceError(f"{p}: not UTF-8 text ({exc.reason})") from None
        except (OSError, EOFError) as exc:
            raise TraceError(f"{p}: cannot read ({exc})") from None
    if not ids:
        raise TraceError(f"{p}: no requests")
    return Trace(
        name=p.name,
        ids=ids,
        start=np.array(start, dtype=np.float64),
        end=np.array(end, dtype=np.float64),
        flavor=np.array(flavor, dtype=np.int32),
        business=np.array(business, dtype=np.int8),
        flavor_names=list(flavor_index),
        flavors=flavors,
        zone=np.array(zone, dtype=np.int32),
        zones=list(zones),
        group=np.array(group, dtype=np.int32),
        groups=[
            ServerGroup(id=g, policy=GroupPolicy.ANTI_AFFINITY, max_server_per_host=1)
            for g in groups
        ],
        lines=np.array(lines, dtype=np.int32),
        source=str(p),
        horizon=max(start),
        window=_window(max(start) - max(0.0, min(start))),
    )


def _window(span: float) -> float:
    """A reporting window giving roughly 10-30 windows over the trace."""
    for w in (60.0, 600.0, 3600.0, 6 * 3600.0, 86_400.0, 7 * 86_400.0):
        if span / w <= 30:
            return w
    return 30 * 86_400.0


def _flavor_of(row: dict[str, Any], flavors: dict[str, Flavor]) -> str:
    named = None if _blank(row.get("flavor")) else str(row["flavor"]).strip()
    sized = not _blank(row.get("vcpus")) or not _blank(row.get("memory_mb"))
    if named is not None and not sized:
        return named
    if _blank(row.get("vcpus")) or _blank(row.get("memory_mb")):
        raise ValueError("needs a flavor, or vcpus and memory_mb")
    vcpus = _size(row["vcpus"], "vcpus")
    memory = _size(row["memory_mb"], "memory_mb")
    disk = 0 if _blank(row.get("disk_gb")) else _size(row["disk_gb"], "disk_gb")
    if vcpus < 1 or memory < 1:
        raise ValueError(f"vcpus and memory_mb must be at least 1, got {vcpus} and {memory}")
    name = named or f"v{vcpus}-m{memory}" + (f"-d{disk}" if disk else "")
    flavor = Flavor(name=name, vcpus=vcpus, memory_mb=memory, root_gb=disk)
    known = flavors.setdefault(name, flavor)
    if known != flavor:
        raise ValueError(
            f"flavor {name!r} is {known.vcpus} vCPUs / {known.memory_mb} MB / "
            f"{known.root_gb} GB on an earlier line, {vcpus} / {memory} / {disk} here"
        )
    return name


def _business_of(row: dict[str, Any]) -> Business:
    raw = row.get("business")
    if not _blank(raw):
        return Business.parse(str(raw))
    prio = row.get("priority")
    if _blank(prio):
        return Business.ON_DEMAND
    level = _number(prio, "priority")
    if level not in (0.0, 1.0):
        raise ValueError(f"priority must be 0 (regular) or 1 (low), got {level:g}")
    return Business.PREEMPTIBLE if level == 1.0 else Business.ON_DEMAND


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace in the generic format (CSV, or JSONL by suffix).

    Flavors go by name; plain ones (no extra specs, no ephemeral disk or swap) also carry
    their size so the file stands alone. Others must be defined in the fleet file.
    """
    p = Path(path)
    cols = ["id", "start", "end", "flavor", "vcpus", "memory_mb", "disk_gb"]
    cols += ["business", "zone", "group"]
    out: list[dict[str, Any]] = []
    for i, rid in enumerate(trace.ids):
        z, g = int(trace.zone[i]), int(trace.group[i])
        name = trace.flavor_names[int(trace.flavor[i])]
        f = trace.flavors.get(name)
        plain = f is not None and not f.extra_specs and not f.ephemeral_gb and not f.swap_mb
        out.append(
            {
                "id": rid,
                "start": float(trace.start[i]),
                "end": float(trace.end[i]) if math.isfinite(trace.end[i]) else "inf",
                "flavor": name,
                "vcpus": f.vcpus if plain and f is not None else "",
                "memory_mb": f.memory_mb if plain and f is not None else "",
                "disk_gb": f.root_gb if plain and f is not None and f.root_gb else "",
                "business": Business(int(trace.business[i])).label,
                "zone": trace.zones[z] if z >= 0 else "",
                "group": trace.groups[g].id if g >= 0 else "",
            }
        )
    if ".jsonl" in p.suffixes:
        with p.open("w", encoding="utf-8") as stream:
            for row in out:
                stream.write(json.dumps({k: v for k, v in row.items() if v != ""}) + "\n")
        return
    with p.open("w", encoding="utf-8", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=cols)
        writer.writeheader()
        for row in out:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
