"""How many servers to buy: the search behind `berth plan-capacity` (pure; docs/plan-capacity.md).

A purchase is a count per offered host type, bought in every cluster (a sizing-spec term:
"N hosts of type X per cluster"). Its cost is Σ price × count × clusters. A replay of the trace
on the fleet plus the purchase says whether it meets the target (`Target`: acceptance of the
target requests in the window and in the warm-up, and at most a share of preemptible
placements evicted). The search:

1. **bound**: the cheapest purchase that meets a necessary condition (`capacity_bound`), found
   exactly by a small MIP. Any cheaper purchase is proven to fail without a replay, and if this
   one passes in replay it is the cheapest of all (claim "optimal").
2. **path**: otherwise the cheapest covers of the forced demand scaled by λ = 1.05, 1.15, ...
   are replayed, `width` at a time (the executor's parallelism), until one passes; then λ is
   bisected between the last failure and the first pass. If none passes up to 8x (what is short
   is a type the volume does not ask for), 1, 2, 4, ... hosts of one type, or of every type,
   are added to the bound's purchase until one does.
3. **descent**: from that pass, each type's count is bisected down (the others fixed; the bound
   gives the floor), the dearest type first.
4. **check**: every purchase with one host fewer of one type of the mix is replayed (or proven
   to fail by the bound). If all fail, the answer is minimal (claim "minimal": one host fewer of
   any type in the mix fails); if one passes, the descent starts again from it.

Every purchase ever evaluated is kept (`PlanResult.evaluated`): the acceptance curve the answer
was chosen from. The replays are the injected `evaluate` (berth.sim.capacity_exec runs them on
local processes or a Dask cluster); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from berth.core.errors import BerthError
from berth.sim.capacity_bound import CoverBound
from berth.solvers.cover import cheapest_cover

Purchase = tuple[int, ...]


class PlanError(BerthError):
    """Bad planning input (target out of range, an offer without a price, ...)."""


@dataclass(frozen=True)
class Offer:
    """A host type on offer and its price (any unit: money, rack units, watts; > 0)."""

    name: str
    price: float


@dataclass(frozen=True)
class Target:
    acceptance: float = 0.995
    """Least share of the target requests accepted, in the window and in the warm-up apart."""
    evictions: float | None = None
    """Most share of the preemptible instances placed that may be evicted (None: no limit)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.acceptance <= 1.0:
            raise PlanError(
                f"--target-acceptance must be in (0, 1] (e.g. 0.995 or 99.5%), "
                f"got {self.acceptance!r}"
            )
        if self.evictions is not None and not 0.0 <= self.evictions <= 1.0:
            raise PlanError(
                f"--target-evictions must be in [0, 1] (e.g. 0.05 or 5%), got {self.evictions!r}"
            )


@dataclass(frozen=True)
class Outcome:
    """What one purchase did in replay (or why it was not replayed: `pruned`)."""

    purchase: Purchase
    acceptance: float | None = None
    """Target requests accepted in the window / arrived (None: none arrived)."""
    warmup_acceptance: float | None = None
    eviction_rate: float | None = None
    """Preemptible instances evicted / preemptible instances placed (None: none placed)."""
    overall: float | None = None
    """Every in-window request, any business type."""
    hosts: int = 0
    wall_s: float = 0.0
    pruned: str | None = None
    """The bound constraint this purchase breaks: proven to fail, never replayed."""

    def meets(self, target: Target) -> bool:
        if self.pruned is not None:
            return False
        for value in (self.acceptance, self.warmup_acceptance):
            if value is not None and value < target.acceptance - 1e-12:
                return False
        if target.evictions is None or self.eviction_rate is None:
            return True
        return self.eviction_rate <= target.evictions + 1e-12

    def to_dict(self) -> dict[str, Any]:
        return {
            "purchase": list(self.purchase),
            "acceptance": self.acceptance,
            "warmup_acceptance": self.warmup_acceptance,
            "eviction_rate": self.eviction_rate,
            "overall_acceptance": self.overall,
            "hosts": self.hosts,
            "wall_s": self.wall_s,
            "pruned": self.pruned,
        }


Evaluate = Callable[[Sequence[Purchase]], list[Outcome]]
"""Replays purchases (in parallel where it can); returns their outcomes in the same order."""


@dataclass
class PlanResult:
    offers: list[Offer]
    clusters: int
    target: Target
    purchase: Purchase | None
    outcome: Outcome | None
    claim: str
    """"optimal" (the bound's cheapest purchase passed), "minimal" (every purchase with one
    host fewer of one type of the mix fails), "unverified" (replay budget spent) or "none"."""
    bound_purchase: Purchase | None
    evaluated: list[Outcome] = field(default_factory=list)
    checks: list[Outcome] = field(default_factory=list)
    """The one-host-fewer purchases of the minimality check."""
    notes: list[str] = field(default_factory=list)

    def cost(self, purchase: Purchase) -> float:
        return self.clusters * sum(o.price * n for o, n in zip(self.offers, purchase, strict=True))

    def describe(self, purchase: Purchase) -> str:
        """``2xstd-2s+1xdpdk-2s`` (per cluster); ``nothing`` for an empty purchase."""
        terms = [f"{n}x{o.name}" for o, n in zip(self.offers, purchase, strict=True) if n]
        return "+".join(terms) or "nothing"


class _Search:
    """The state of one search: the outcomes seen, the replay budget, the bound."""

    def __init__(
        self,
        bound: CoverBound,
        offers: Sequence[Offer],
        target: Target,
        evaluate: Evaluate,
        upper: int,
        max_replays: int,
    ) -> None:
        self.bound, self.target, self.evaluate = bound, target, evaluate
        self.prices = np.array([o.price for o in offers], dtype=np.float64)
        self.upper = np.full(len(offers), upper, dtype=np.int64)
        self.seen: dict[Purchase, Outcome] = {}
        self.order: list[Outcome] = []
        self.replays, self.max_replays = 0, max_replays

    @property
    def spent(self) -> bool:
        return self.replays >= self.max_replays

    def cost(self, x: Purchase) -> float:
        return float(self.prices @ np.array(x, dtype=np.float64))

    def cover(self, scale: float) -> Purchase | None:
        x = cheapest_cover(self.bound.matrix, self.bound.need(scale), self.prices, self.upper)
        return None if x is None else tuple(int(v) for v in x)

    def run(self, purchases: Sequence[Purchase]) -> list[Outcome]:
        """Outcomes of `purchases`: known ones from memory, bound-pruned ones without a replay,
        the rest replayed together (within the budget; past it they are left out)."""
        fresh: list[Purchase] = []
        for x in dict.fromkeys(purchases):
            if x in self.seen:
                continue
            broken = self.bound.violated(x)
            if broken is not None:
                self._keep(Outcome(x, pruned=broken))
            else:
                fresh.append(x)
        fresh = fresh[: max(0, self.max_replays - self.replays)]
        if fresh:
            self.replays += len(fresh)
            for outcome in self.evaluate(fresh):
                self._keep(outcome)
        return [self.seen[x] for x in purchases if x in self.seen]

    def _keep(self, outcome: Outcome) -> None:
        self.seen[outcome.purchase] = outcome
        self.order.append(outcome)

    def passes(self, x: Purchase) -> bool | None:
        known = self.seen.get(x)
        return None if known is None else known.meets(self.target)

    def floor(self, x: Purchase, t: int) -> int:
        """The least count of type t the bound allows with the other counts of `x` fixed."""
        a = self.bound.matrix
        rest = a @ np.array(x, dtype=np.float64) - a[:, t] * x[t]
        gap = self.bound.need() - rest
        rows = (gap > 1e-9) & (a[:, t] > 0)
        if not rows.any():
            return 0
        return int(np.ceil((gap[rows] / a[rows, t]).max() - 1e-9))


SCALES = (1.0, 1.05, 1.15, 1.3, 1.5, 1.8, 2.2, 2.8, 3.6, 4.6, 6.0, 8.0)
"""The path's demand scales λ, tried in order; beyond 8× the forced demand the search gives up."""


def plan(
    bound: CoverBound,
    offers: Sequence[Offer],
    target: Target,
    evaluate: Evaluate,
    *,
    clusters: int = 1,
    width: int = 2,
    upper: int = 10_000,
    max_replays: int = 80,
) -> PlanResult:
    """The cheapest purchase found that meets `target` (module docstring)."""
    if not offers:
        raise PlanError("no host type on offer (give --offer TYPE:PRICE)")
    search = _Search(bound, offers, target, evaluate, upper, max_replays)
    result = PlanResult(list(offers), clusters, target, None, None, "none", None)
    result.bound_purchase = search.cover(1.0)
    unreachable = bound.unreachable()
    if result.bound_purchase is None or unreachable is not None:
        why = unreachable or "the most hosts a plan may buy"
        result.notes.append(f"no purchase of the offered types can meet the target: {why}")
        result.evaluated = search.order
        return result
    best = _walk_path(search, max(1, width))
    if best is None and not search.spent:
        best = _climb(search, result.bound_purchase, max(1, width))
    if best is None:
        result.notes.append(
            "no purchase met the target"
            + (" (replay budget spent)" if search.spent else f" up to {upper} hosts of a type")
        )
        result.evaluated = search.order
        return result
    if best == result.bound_purchase:
        result.claim = "optimal"
    else:
        best, result.checks, verified = _descend(search, best, max(1, width))
        result.claim = "minimal" if verified else "unverified"
    result.purchase, result.outcome = best, search.seen[best]
    result.evaluated = search.order
    if result.claim == "unverified":
        result.notes.append(f"replay budget ({max_replays}) spent before minimality was checked")
    return result


def _walk_path(search: _Search, width: int) -> Purchase | None:
    """The cheapest passing purchase on the path of scaled covers (None: none up to 8x)."""
    path: list[tuple[float, Purchase]] = []
    for scale in SCALES:
        x = search.cover(scale)
        if x is not None and all(x != p for _, p in path):
            path.append((scale, x))
    lo, hi, best = 0.0, None, None
    for start in range(0, len(path), width):
        batch = path[start : start + width]
        search.run([x for _, x in batch])
        passing = [(s, x) for s, x in batch if search.passes(x)]
        failing = [s for s, x in batch if search.passes(x) is False]
        if passing:
            hi, best = passing[0]
            lo = max([s for s in failing if s < hi], default=lo)
            break
        lo = max(failing, default=lo)
        if search.spent:
            return None
    if best is None or hi is None:
        return None
    # bisect λ between the last failure and the first pass
    while hi - lo > 0.01 and not search.spent:
        scales = [lo + (hi - lo) * (k + 1) / (width + 1) for k in range(width)]
        covers = [(s, search.cover(s)) for s in scales]
        fresh = [(s, x) for s, x in covers if x is not None and x not in search.seen]
        if not fresh:
            break
        search.run([x for _, x in fresh])
        for s, x in covers:
            if x is None or search.passes(x) is None:
                continue
            if search.passes(x) and search.cost(x) <= search.cost(best):
                hi, best = min(hi, s), x
            elif not search.passes(x):
                lo = max(lo, s) if s < hi else lo
    return best


def _climb(search: _Search, start: Purchase, width: int) -> Purchase | None:
    """When no scaled cover passes (what is short is a type the volume does not ask for, e.g.
    hosts for anti-affinity or NUMA shapes): from the bound's purchase add 1, 2, 4, ... hosts of
    one type, or of every type, cheapest first, until a purchase passes (None: none does up to
    the upper limit, or the budget ran out)."""
    step = 1
    while not search.spent:
        grown = [tuple(v + step * (i == t) for i, v in enumerate(start)) for t in range(len(start))]
        grown.append(tuple(v + step for v in start))
        grown = sorted({x for x in grown if max(x) <= search.upper[0]}, key=search.cost)
        if not grown:
            return None
        for k in range(0, len(grown), width):
            batch = grown[k : k + width]
            search.run(batch)
            passing = [x for x in batch if search.passes(x)]
            if passing:
                return min(passing, key=search.cost)
        step *= 2
    return None


def _descend(search: _Search, best: Purchase, width: int) -> tuple[Purchase, list[Outcome], bool]:
    """Bisect each count down, then check one host fewer of each type; repeat while a check
    passes. Returns the answer, the last check's outcomes and whether the check was done."""
    while True:
        for t in np.argsort(-search.prices, kind="stable"):
            best = _bisect_type(search, best, int(t), width)
        fewer = [
            tuple(v - (i == t) for i, v in enumerate(best)) for t in range(len(best)) if best[t]
        ]
        checks = search.run(fewer)
        if len(checks) < len(fewer):
            return best, checks, False
        passing = [o.purchase for o in checks if o.meets(search.target)]
        if not passing:
            return best, checks, True
        best = min(passing, key=search.cost)


def _bisect_type(search: _Search, x: Purchase, t: int, width: int) -> Purchase:
    """The least count of type t that still passes, the other counts of `x` fixed."""
    hi = x[t]
    lo = search.floor(x, t) - 1  # below the floor the bound proves failure
    while hi - lo > 1 and not search.spent:
        points = sorted({lo + (hi - lo) * (k + 1) // (width + 1) for k in range(width)})
        points = [p for p in points if lo < p < hi]
        if not points:
            points = [lo + 1]
        trial = [tuple(p if i == t else v for i, v in enumerate(x)) for p in points]
        search.run(trial)
        for p, y in zip(points, trial, strict=True):
            ok = search.passes(y)
            if ok is None:
                continue
            if ok:
                hi = min(hi, p)
            else:
                lo = max(lo, p) if p < hi else lo
    return tuple(hi if i == t else v for i, v in enumerate(x))
