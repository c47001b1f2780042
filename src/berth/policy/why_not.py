"""What would make it fit: the ways out of a request that fits nowhere, each priced and checked.

For one instance of a flavor that no host takes, `why_not` plans four kinds of way out on copies
of the table, never on the table itself (docs/why-not.md):

* ``enable_host``: a disabled host (Berth's only host switch; a drained host is a disabled one)
  that would take the request once enabled. Price: 1 host.
* ``migrate``: the fewest live migrations that gather the room on one host, from the core's
  admission search (`core.defrag.admit.plan_admission`). Price: GiB of guest memory moved (what
  a live migration copies), the number of moves in the summary.
* ``evict``: the least-damage set of preemptible instances (`policy.preemption.plan_preemption`).
  Price: vCPUs of the evicted instances.
* ``smaller_flavor``: the closest smaller flavor of the same family (the largest one smaller
  than the request, in vCPUs then memory) that fits now. Price: vCPUs given up.

Each way out is checked by applying it to a copy and running the scheduler's own
`select_destinations`; only ways that then fit are returned, with the host the request lands on.
The units differ, so the answer is ordered by kind (`ORDER`, cheapest disruption first: no
workload touched, workload moved, workload lost, the requester gets less), then by price.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from berth.core.defrag.admit import fitting, plan_admission
from berth.core.defrag.execute import apply_moves
from berth.core.defrag.model import Move
from berth.core.engine import Decision, FilterScheduler
from berth.core.explain import Diagnosis, NoValidHost
from berth.core.flavors import FlavorSpec
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.policy.catalogue import Catalogue
from berth.policy.preemption import plan_preemption

ORDER = ("enable_host", "migrate", "evict", "smaller_flavor")
"""Kinds from the least to the most disruptive: the order of the answer."""


@dataclass(frozen=True)
class WayOut:
    """One checked way out: what to do, its price, and where the request then lands."""

    kind: str
    price: float
    unit: str
    summary: str
    fits: bool
    check_host: str | None
    hosts: tuple[str, ...] = ()
    """enable_host: the hosts to enable."""
    moves: tuple[Move, ...] = ()
    """migrate: the live migrations, in order."""
    evictions: tuple[str, ...] = ()
    """evict: the instances to evict, in order."""
    flavor: str | None = None
    """smaller_flavor: the flavor to ask for instead."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "price": self.price,
            "unit": self.unit,
            "summary": self.summary,
            "fits": self.fits,
            "check_host": self.check_host,
            "hosts": list(self.hosts),
            "moves": [m.model_dump(mode="json") for m in self.moves],
            "evictions": list(self.evictions),
            "flavor": self.flavor,
        }


@dataclass(frozen=True)
class WhyNot:
    flavor: str
    fits_now: bool
    host: str | None
    """Where it fits now (`fits_now`)."""
    diagnosis: Diagnosis | None
    options: tuple[WayOut, ...]
    notes: tuple[str, ...] = ()
    cluster: str | None = None

    def headline(self) -> str:
        where = f" in {self.cluster}" if self.cluster else ""
        if self.fits_now:
            return f"{self.flavor} fits now{where} (on {self.host}): nothing to do"
        assert self.diagnosis is not None
        n = len(self.options)
        return f"{self.flavor}{where}: {self.diagnosis}; {n} way{'s' if n != 1 else ''} out"

    def to_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "cluster": self.cluster,
            "fits_now": self.fits_now,
            "host": self.host,
            "message": self.headline(),
            "diagnosis": None if self.diagnosis is None else self.diagnosis.to_dict(),
            "options": [o.to_dict() for o in self.options],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class WhyNotOptions:
    availability_zone: str | None = None
    project: str = "default"
    preemptible_projects: tuple[str, ...] = ()
    """For fleet files: instances of these projects may be evicted (`why_not_fleet`)."""
    max_moves: int = 3
    max_hosts: int = 3
    """Most hosts to enable shown (each is its own way out)."""
    cluster: str | None = None
    order: tuple[str, ...] = field(default=ORDER)
    draining: frozenset[str] = frozenset()
    """Disabled hosts that are marked for drain (the service's drain flag): "undrain" them."""


def why_not(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    *,
    preemptible: Callable[[Allocation], bool] | None = None,
    family: Sequence[str] = (),
    options: WhyNotOptions = WhyNotOptions(),
) -> WhyNot:
    """The checked ways out for one instance of `request` (`family`: the flavors that may
    replace it, any order). The table is not changed."""
    if request.num_instances != 1:
        raise ValueError("num_instances: why-not answers for one instance")
    try:
        decision = scheduler.select_destinations(table, request, now)
    except NoValidHost as exc:
        diagnosis = exc.diagnosis
    else:
        return WhyNot(request.flavor, True, decision.hosts[0], None, (), (), options.cluster)
    found: list[WayOut] = []
    notes: list[str] = []
    found += _enable(scheduler, table, request, now, options, notes)
    found += _migrate(scheduler, table, request, now, options.max_moves, notes)
    found += _evict(scheduler, table, request, now, preemptible, notes)
    found += _smaller(scheduler, table, request, now, family, notes)
    rank = {k: i for i, k in enumerate(options.order)}
    found.sort(key=lambda w: (rank.get(w.kind, len(rank)), w.price))
    return WhyNot(
        request.flavor, False, None, diagnosis, tuple(found), tuple(notes), options.cluster
    )


def check(
    scheduler: FilterScheduler, table: HostTable, request: RequestSpec, now: float
) -> Decision | None:
    """The decision on `table` as it is, or None when nothing fits."""
    try:
        return scheduler.select_destinations(table, request, now)
    except NoValidHost:
        return None


def _enable(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    options: WhyNotOptions,
    notes: list[str],
) -> list[WayOut]:
    limit = options.max_hosts
    off = np.flatnonzero(~table.enabled)
    if off.size == 0:
        return []
    every = table.copy()
    for row in off:
        every.set_enabled(table.names[row], True)
    rows = np.flatnonzero(fitting(every, request, scheduler, now) & ~table.enabled)
    if rows.size == 0:
        notes.append(f"none of the {off.size} disabled hosts would take it once enabled")
        return []
    out = []
    for row in rows[:limit]:
        name = table.names[row]
        trial = table.copy()
        trial.set_enabled(name, True)
        decision = check(scheduler, trial, request, now)
        if decision is not None:
            out.append(
                WayOut(
                    "enable_host",
                    1.0,
                    "host",
                    f"{'undrain' if name in options.draining else 'enable'} host {name}",
                    True,
                    decision.hosts[0],
                    hosts=(name,),
                )
            )
    if rows.size > limit:
        notes.append(f"{rows.size} disabled hosts would take it; the first {limit} are shown")
    return out


def _migrate(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    max_moves: int,
    notes: list[str],
) -> list[WayOut]:
    admission = plan_admission(
        table, request, scheduler=scheduler, now=now, max_migrations=max_moves
    )
    if admission is None:
        notes.append(f"no {max_moves} live migrations or fewer make room on one host")
        return []
    trial = table.copy()
    apply_moves(trial, admission.moves)
    decision = check(scheduler, trial, request, now)
    if decision is None:  # pragma: no cover - the search checks with the same filters
        notes.append("the planned migrations did not make it fit when applied")
        return []
    gib = sum(table.flavors[m.flavor].memory_mb for m in admission.moves) / 1024
    n = len(admission.moves)
    moved = ", ".join(f"{m.instance_id} {m.source}->{m.target}" for m in admission.moves)
    return [
        WayOut(
            "migrate",
            gib,
            "GiB moved",
            f"{n} live migration{'s' if n > 1 else ''}: {moved}",
            True,
            decision.hosts[0],
            moves=admission.moves,
        )
    ]


def _evict(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    preemptible: Callable[[Allocation], bool] | None,
    notes: list[str],
) -> list[WayOut]:
    if preemptible is None:
        notes.append("no instance is marked preemptible: evictions not considered")
        return []
    plan = plan_preemption(scheduler, table, request, now, preemptible, known_not_to_fit=True)
    if plan is None or not plan.evictions:
        notes.append("evicting preemptible instances does not make room")
        return []
    trial = table.copy()
    for iid in plan.evictions:
        trial.release(iid)
    decision = check(scheduler, trial, request, now)
    if decision is None:  # pragma: no cover - the plan is verified by the scheduler
        notes.append("the planned evictions did not make it fit when applied")
        return []
    vcpus = sum(table.flavors[table.allocations[i].flavor].vcpus for i in plan.evictions)
    n = len(plan.evictions)
    return [
        WayOut(
            "evict",
            float(vcpus),
            "vCPUs evicted",
            f"evict {n} preemptible instance{'s' if n > 1 else ''}: {', '.join(plan.evictions)}",
            True,
            decision.hosts[0],
            evictions=plan.evictions,
        )
    ]


def _smaller(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    family: Sequence[str],
    notes: list[str],
) -> list[WayOut]:
    want = table.flavors[request.flavor]
    smaller = [
        table.flavors[f] for f in family if f in table.flavors and _below(table.flavors[f], want)
    ]
    smaller.sort(key=lambda f: (-f.vcpus, -f.memory_mb, f.name))
    for spec in smaller:
        decision = check(scheduler, table, request.model_copy(update={"flavor": spec.name}), now)
        if decision is not None:
            given = want.vcpus - spec.vcpus
            return [
                WayOut(
                    "smaller_flavor",
                    float(given),
                    "vCPUs given up",
                    f"ask for {spec.name} ({spec.vcpus} vCPUs, {spec.memory_mb} MB) instead",
                    True,
                    decision.hosts[0],
                    flavor=spec.name,
                )
            ]
    notes.append(
        f"no smaller flavor of its family fits now ({len(smaller)} tried)"
        if smaller
        else "its family has no smaller flavor"
    )
    return []


def _below(spec: FlavorSpec, want: FlavorSpec) -> bool:
    """At most the request in vCPUs and memory, and less in one of them."""
    no_more = spec.vcpus <= want.vcpus and spec.memory_mb <= want.memory_mb
    return no_more and (spec.vcpus, spec.memory_mb) != (want.vcpus, want.memory_mb)


# ---------------------------------------------------------------------------- families
def family_by_name(flavors: Sequence[str], flavor: str) -> list[str]:
    """Flavors named like `flavor` but for the size: ``c3.4xlarge.numa1`` -> every
    ``c3.<size>.numa1`` (first dotted part and everything after the second the same)."""
    parts = flavor.split(".")
    if len(parts) < 2:
        return []
    same = [name.split(".") for name in flavors if name != flavor]
    return [
        ".".join(o)
        for o in same
        if len(o) == len(parts) and o[0] == parts[0] and o[2:] == parts[2:]
    ]


def family_from_catalogue(catalogue: Catalogue, flavor: str) -> list[str]:
    """The concrete flavors of the same family and variant as `flavor` in the policy's
    catalogue (`policy.catalogue`); [] for a flavor the catalogue does not make."""
    origin = catalogue.origin.get(flavor)
    if origin is None:
        return []
    base, variant = origin
    family = catalogue.bases[base].family
    return [
        c.flavor
        for (b, v), c in catalogue.concrete.items()
        if v == variant and catalogue.bases[b].family == family and c.flavor != flavor
    ]


def why_not_fleet(
    scheduler: FilterScheduler,
    table: HostTable,
    flavor: str,
    now: float,
    options: WhyNotOptions = WhyNotOptions(),
    family: Sequence[str] | None = None,
) -> WhyNot:
    """`why_not` for a fleet snapshot: instances of `options.preemptible_projects` may be
    evicted, and the family comes from the flavor names unless given."""
    table.demand(flavor)
    request = RequestSpec(
        flavor=flavor,
        availability_zone=options.availability_zone,
        project=options.project,
        instance_ids=("why-not",),
    )
    projects = frozenset(options.preemptible_projects)
    preemptible = (lambda a: a.project in projects) if projects else None
    return why_not(
        scheduler,
        table,
        request,
        now,
        preemptible=preemptible,
        family=family if family is not None else family_by_name(sorted(table.flavors), flavor),
        options=options,
    )
