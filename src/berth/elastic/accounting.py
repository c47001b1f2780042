"""Accounting: VM-hours, CPU-hours and points per group, user and day, from the state history.

Pure: the history is a list of transitions (VM, new state, time) and the VMs' attributes; the
output is rows. A VM is charged from the moment the cloud holds it (BOOTING) until it leaves the
cloud (RETIRED, FAILED, LOST): booting, joined and draining time all count, REQUESTED does not
(no cloud call yet). A VM still live is charged up to `until`. Intervals are split at day
boundaries (UTC plus `utc_offset` seconds).

Points follow the seed's "points system" (per-attribute rates): an hour of a VM earns
`per_vm_hour + cores * per_core_hour + memory_gb * per_gb_hour`, times the factor of its group
and of its flavor (type) — e.g. a GPU flavor or a priority group counting double.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from berth.elastic.model import TERMINAL, VmState

DAY = 86_400.0
CHARGED = frozenset({VmState.BOOTING, VmState.JOINED, VmState.DRAINING})


@dataclass(frozen=True)
class Transition:
    vm: str
    state: VmState
    at: float


@dataclass(frozen=True)
class VmInfo:
    name: str
    group: str
    cores: int
    memory_mb: int
    flavor: str
    user: str = ""  # who the VM is charged to; "" = the group itself


@dataclass(frozen=True)
class Rates:
    per_vm_hour: float = 0.0
    per_core_hour: float = 1.0
    per_gb_hour: float = 0.0
    group_factor: Mapping[str, float] = field(default_factory=dict)
    flavor_factor: Mapping[str, float] = field(default_factory=dict)

    def hourly(self, vm: VmInfo) -> float:
        base = self.per_vm_hour + vm.cores * self.per_core_hour
        base += vm.memory_mb / 1024.0 * self.per_gb_hour
        return base * self.group_factor.get(vm.group, 1.0) * self.flavor_factor.get(vm.flavor, 1.0)


@dataclass(frozen=True)
class UsageRow:
    day: str  # ISO date
    group: str
    user: str
    vms: int  # distinct VMs charged that day
    vm_hours: float
    cpu_hours: float
    memory_gb_hours: float
    points: float

    def as_dict(self) -> dict[str, object]:
        return {
            "day": self.day,
            "group": self.group,
            "user": self.user,
            "vms": self.vms,
            "vm_hours": round(self.vm_hours, 6),
            "cpu_hours": round(self.cpu_hours, 6),
            "memory_gb_hours": round(self.memory_gb_hours, 6),
            "points": round(self.points, 6),
        }


COLUMNS = ("day", "group", "user", "vms", "vm_hours", "cpu_hours", "memory_gb_hours", "points")


def charged_intervals(
    history: Iterable[Transition], until: float
) -> dict[str, list[tuple[float, float]]]:
    """Per VM the [start, end) intervals in a charged state. Transitions may come in any order;
    equal times keep their given order."""
    by_vm: dict[str, list[tuple[float, int, VmState]]] = {}
    for k, t in enumerate(history):
        if t.at != t.at:  # NaN
            raise ValueError(f"history[{k}].at: not a number")
        by_vm.setdefault(t.vm, []).append((t.at, k, t.state))
    out: dict[str, list[tuple[float, float]]] = {}
    for vm, moves in by_vm.items():
        moves.sort()
        spans: list[tuple[float, float]] = []
        start: float | None = None
        for at, _, state in moves:
            if state in CHARGED and start is None:
                start = at
            elif state not in CHARGED and start is not None:
                spans.append((start, at))
                start = None
            if state in TERMINAL:
                break
        if start is not None and until > start:
            spans.append((start, until))
        out[vm] = [(a, b) for a, b in spans if b > a]
    return out


def _split_days(a: float, b: float, offset: float) -> Iterable[tuple[int, float]]:
    day = int((a + offset) // DAY)
    while a < b:
        end = min(b, (day + 1) * DAY - offset)
        yield day, end - a
        a, day = end, day + 1


def usage(
    history: Iterable[Transition],
    vms: Mapping[str, VmInfo],
    rates: Rates,
    *,
    until: float,
    utc_offset: float = 0.0,
) -> list[UsageRow]:
    """Rows per (day, group, user), sorted; a VM missing from `vms` is an error naming it."""
    spans = charged_intervals(history, until)
    acc: dict[tuple[int, str, str], list[float]] = {}
    seen: dict[tuple[int, str, str], set[str]] = {}
    for name in sorted(spans):
        info = vms.get(name)
        if info is None:
            raise ValueError(f"vms[{name}]: the history names a VM with no attributes")
        hourly = rates.hourly(info)
        user = info.user or info.group
        for a, b in spans[name]:
            for day, seconds in _split_days(a, b, utc_offset):
                key = (day, info.group, user)
                h = seconds / 3600.0
                row = acc.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                row[0] += h
                row[1] += h * info.cores
                row[2] += h * info.memory_mb / 1024.0
                row[3] += h * hourly
                seen.setdefault(key, set()).add(name)
    epoch = dt.date(1970, 1, 1)
    return [
        UsageRow(
            day=(epoch + dt.timedelta(days=day)).isoformat(),
            group=group,
            user=user,
            vms=len(seen[(day, group, user)]),
            vm_hours=v[0],
            cpu_hours=v[1],
            memory_gb_hours=v[2],
            points=v[3],
        )
        for (day, group, user), v in sorted(acc.items())
    ]


def rows_to_csv(rows: Iterable[UsageRow]) -> str:
    """CSV text with a header line (for `berth elastic accounting --csv` and the API)."""
    lines = [",".join(COLUMNS)]
    for r in rows:
        d = r.as_dict()
        lines.append(",".join(_csv_cell(d[c]) for c in COLUMNS))
    return "\n".join(lines) + "\n"


def _csv_cell(value: object) -> str:
    text = str(value)
    if any(ch in text for ch in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text
