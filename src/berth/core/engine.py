"""The scheduling pipeline: filter, weigh, select; `select_destinations` and commit.

`select_destinations` reads the table and returns a `Decision` without changing the table: each
instance of a multi-instance request is claimed tentatively so the next one sees it, and every
tentative claim is undone exactly before returning (or raising). `commit` then applies a
decision only if every host it touches is still at the generation the decision read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from berth.core import kernels
from berth.core.config import SchedulerConfig, check_names, parse_params
from berth.core.errors import ClaimError, SpecError, StaleGenerationError
from berth.core.explain import NoValidHost, diagnose
from berth.core.filters.base import Context, HostFilter, Mask
from berth.core.registry import filter_class, weigher_class
from berth.core.request import RequestSpec
from berth.core.table import Allocation, HostTable
from berth.core.weighers.base import HostWeigher, normalise

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_TIE = kernels.TIE
_COLUMN_TYPES = (np.dtype(np.float64), np.dtype(np.int64))
"""Weigher columns the compiled scoring reads as they are (cast to float64 as ``astype``)."""


@dataclass(frozen=True)
class Selection:
    """Where one instance goes, exactly, and the hosts to try if that one fails."""

    instance_id: str
    host: str
    alternates: tuple[str, ...]
    cell_use: I64 = field(compare=False)
    host_use: I64 = field(compare=False)


@dataclass(frozen=True)
class Decision:
    request: RequestSpec
    selections: tuple[Selection, ...]
    generations: dict[str, int]
    """Each touched host's generation as read when deciding (the commit's precondition)."""

    @property
    def hosts(self) -> list[str]:
        return [s.host for s in self.selections]


class Term(NamedTuple):
    """One weigher's part of `_scores`, kept only when asked (`core.why` reads it): `raw` as the
    weigher gave it, `values` as scaled (``max(raw, minval)`` for Nova's weighers, else `raw`),
    the extremes `lo` and `hi` the engine divided by, and for a weigher whose values are not
    float64 the `term` array it added (else None: the float64 arithmetic is redone per host)."""

    weigher: HostWeigher
    weight: float
    raw: npt.NDArray[np.generic]
    values: npt.NDArray[np.generic]
    lo: float
    hi: float
    term: npt.NDArray[np.generic] | None


@dataclass(frozen=True)
class Scored:
    """What one instance's choice was made from, handed to a `WhyHook` (built only then)."""

    ctx: Context
    rows: I64
    scores: F64 | None
    """The engine's scores of `rows` (None: the chance scheduler scores nothing)."""
    terms: tuple[Term, ...]
    step: int
    chosen: int
    alternates: tuple[int, ...]


WhyHook = Callable[[Scored], None]
"""Called once per instance by `select_destinations(..., why=hook)`, before the next instance's
tentative claim (`core.why.WhyRecorder`)."""


def _conjoin(mask: Mask, owned: bool, other: Mask, everyone: Mask) -> tuple[Mask, bool]:
    """``(mask & other, owned)``, never writing into an array the caller does not own (filters
    may return shared, read-only masks): a mask that passes every host (the table's shared
    `everyone`) costs nothing, the first other one is read as it is, the second makes one new
    array (then owned) and later ones are ANDed into it."""
    if other is everyone:
        return mask, owned
    if mask is everyone:
        return other, False
    if owned:
        np.logical_and(mask, other, out=mask)
        return mask, True
    return mask & other, True


def _mix(*values: int) -> int:
    """SplitMix64 over the values: cheap deterministic tie-breaking without an RNG object."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
        x = x * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
    return x


class FilterScheduler:
    """Nova's filter scheduler over the columnar table."""

    def __init__(
        self,
        filters: Sequence[HostFilter],
        weighers: Sequence[tuple[HostWeigher, float]] = (),
        *,
        host_subset_size: int = 1,
        max_attempts: int = 3,
    ) -> None:
        self.filters = list(filters)
        self.weighers = [(w, weight) for w, weight in weighers if weight != 0.0]
        self._arange = np.zeros(0, dtype=np.int64)
        self.host_subset_size = host_subset_size
        self.max_attempts = max_attempts

    @classmethod
    def from_config(cls, config: SchedulerConfig) -> FilterScheduler:
        check_names(config)
        filters = []
        for name in config.filters:
            klass = filter_class(name)
            raw = config.filter_params.get(name, {})
            filters.append(klass(parse_params("filter", name, klass.Params, raw)))
        weighers = []
        for w in config.weighers:
            wklass = weigher_class(w.name)
            weighers.append(
                (wklass(parse_params("weigher", w.name, wklass.Params, w.params)), w.weight)
            )
        kwargs = {"host_subset_size": config.host_subset_size, "max_attempts": config.max_attempts}
        if config.driver == "chance":
            return ChanceScheduler(filters, (), **kwargs)
        return cls(filters, weighers, **kwargs)

    # ------------------------------------------------------------------ decisions
    def select_destinations(
        self, table: HostTable, request: RequestSpec, now: float, *, why: WhyHook | None = None
    ) -> Decision:
        """Choose hosts for every instance of `request`, all or nothing; the table is unchanged.

        Raises `NoValidHost` with a diagnosis when some instance fits nowhere. With `why`, each
        instance's scores and weigher terms go to the hook (`core.why`); the choice is the same.
        """
        demand = table.demand(request.flavor)
        if request.server_group is not None and request.server_group not in table.groups:
            raise SpecError(f"server_group: unknown server group {request.server_group!r}")
        ids = request.ids()
        if len(ids) != request.num_instances:
            raise SpecError("instance_ids: must have num_instances entries")
        if len(set(ids)) != len(ids):
            raise SpecError("instance_ids: the same id appears twice")
        clash = next((i for i in ids if i in table.allocations), None)
        if clash is not None:
            raise SpecError(f"instance_ids: {clash!r} already exists")

        ctx = Context(table, request, demand, now)
        static = [f for f in self.filters if f.static]
        dynamic = [f for f in self.filters if not f.static]
        static_mask = self._combine(ctx, static, table.everyone(), None)

        selections: list[Selection] = []
        generations: dict[str, int] = {}
        undo: list[tuple[str, int]] = []
        try:
            for i, iid in enumerate(ids):
                rows = self._candidates(ctx, dynamic, static_mask)
                if rows.size == 0:
                    raise NoValidHost(diagnose(ctx, self.filters, instance=i + 1))
                chosen, alternates = self._choose(ctx, rows, request.seed, i, why)
                host = table.names[chosen]
                generations.setdefault(host, int(table.generation[chosen]))
                cell_use, host_use = table.plan_for(request.flavor, chosen)
                selections.append(
                    Selection(
                        iid, host, tuple(table.names[a] for a in alternates), cell_use, host_use
                    )
                )
                if i + 1 == len(ids):
                    # nothing follows: verify the footprint, but skip the tentative claim
                    table.verify_fits(host, cell_use, host_use)
                    break
                generation = int(table.generation[chosen])
                table.claim(
                    iid,
                    host,
                    request.flavor,
                    cell_use,
                    host_use,
                    server_group=request.server_group,
                    project=request.project,
                )
                undo.append((iid, generation))
        finally:
            for iid, generation in reversed(undo):
                table.unclaim(iid, generation)
        return Decision(request, tuple(selections), generations)

    def place_one(
        self,
        table: HostTable,
        request: RequestSpec,
        now: float,
        *,
        instance_id: str,
        seed: int,
    ) -> Allocation:
        """Decide and claim one instance in one go, for a caller that owns the table.

        The same host and footprint as ``commit(table, select_destinations(...))`` for a
        single-instance `request` with this id and seed, without building the decision, its
        alternates or the generation precondition (nothing can change the table in between).
        `request` is a template: its own ids and seed are ignored, so callers need not copy it
        per instance. Raises `NoValidHost` (the same diagnosis) when nothing fits.
        """
        if request.num_instances != 1:
            raise SpecError("num_instances: place_one places exactly one instance")
        demand = table.demand(request.flavor)
        group = request.server_group
        if group is not None and group not in table.groups:
            raise SpecError(f"server_group: unknown server group {group!r}")
        if instance_id in table.allocations:
            raise SpecError(f"instance_ids: {instance_id!r} already exists")
        ctx = Context(table, request, demand, now)
        # static and dynamic alike: one instance, one pass
        rows = self._candidates(ctx, self.filters, table.everyone())
        if rows.size == 0:
            raise NoValidHost(diagnose(ctx, self.filters, instance=1))
        chosen = self._pick(ctx, rows, seed, 0)
        return table.claim_planned(
            instance_id, chosen, request.flavor, server_group=group, project=request.project
        )

    def _combine(
        self,
        ctx: Context,
        filters: Sequence[HostFilter],
        start: Mask,
        bounds: list[tuple[int, int]] | None,
    ) -> Mask:
        """``start & mask_1 & ...`` over `filters` (`_conjoin`: read-only; `start` and the
        filters' masks are never written). With `bounds`, a filter that states a minimum of a
        free host column (`host_minimum`) adds it there instead (checked by
        `kernels.select_rows`, `_candidates`)."""
        everyone = ctx.table.everyone()
        mask, owned = start, False
        for flt in filters:
            if bounds is not None:
                bound = flt.host_minimum(ctx)
                if bound is not None:
                    bounds.append(bound)
                    continue
            mask, owned = _conjoin(mask, owned, flt.mask(ctx), everyone)
        return mask

    def _candidates(self, ctx: Context, filters: Sequence[HostFilter], start: Mask) -> I64:
        """The rows (ascending) that `start` and every filter of `filters` pass: the masks
        ANDed (`_combine`), the free-column minimums checked in one compiled pass."""
        bounds: list[tuple[int, int]] = []
        mask = self._combine(ctx, filters, start, bounds)
        if not bounds:
            return mask.nonzero()[0]
        table = ctx.table
        found = np.empty(len(table), dtype=np.int64)
        n = kernels.select_rows(mask, table.host_free, np.array(bounds, dtype=np.int64), found)
        return found[:n]

    def _pick(self, ctx: Context, rows: I64, seed: int, step: int) -> int:
        """`_choose(...)[0]` without the alternates: the argmax and its ties, no sort.

        When several hosts tie within the top `want` slice but fewer than `want` do, the pool's
        order comes from `argpartition`, so that case (and subset sizes > 1, and tiny candidate
        sets) goes through `_choose` itself: the pick is always the same.
        """
        want = min(rows.size, max(self.max_attempts, self.host_subset_size))
        if self.host_subset_size > 1 or want >= rows.size:
            return self._choose(ctx, rows, seed, step)[0]
        if not self.weighers:  # every score is 0: all hosts tie
            return int(rows[_mix(seed, step, rows.size) % rows.size])
        scored = self._tie_pool(ctx, rows)
        if scored is None:
            scores = self._scores(ctx, rows)
            best = scores[scores.argmax()]  # `max`, for less
            pool = (scores >= best - _TIE).nonzero()[0]
        else:
            scores, pool = scored
        if pool.size >= want:  # `_choose` draws from all tied hosts, in row order
            return int(rows[pool[_mix(seed, step, pool.size) % pool.size]])
        if pool.size == 1:
            return int(rows[pool[0]])
        return self._choose_scored(rows, scores, seed, step)[0]

    def _tie_pool(self, ctx: Context, rows: I64) -> tuple[F64, I64] | None:
        """(scores, positions of the ties for the best), equal to `_scores` and its ties, in
        compiled passes (`_compiled_scores`, then `kernels.ties`); None when `_scores` must
        decide."""
        scores = self._compiled_scores(ctx, rows)
        if scores is None:
            return None
        ties = np.empty(rows.size, dtype=np.int64)
        return scores, ties[: kernels.ties(scores, ties)]

    def _compiled_scores(self, ctx: Context, rows: I64) -> F64 | None:
        """`_scores`, bit for bit, in compiled passes (`kernels.add_scaled` per weigher,
        gathering the candidates from its `column` when it has one); None when some weigher
        scales as Nova does or its raw values are not float64 or hold a NaN (then `_scores`
        decides)."""
        m = rows.size
        scores = np.empty(m, dtype=np.float64)
        started = False
        for weigher, weight in self.weighers:
            if weigher.minval is not None:  # Nova's scaling: `_scores` does it
                return None
            if weigher.constant(ctx):  # all equal: zeros, which add nothing
                continue
            column = weigher.column(ctx)
            if column is not None and column.dtype in _COLUMN_TYPES and column.ndim == 1:
                status = kernels.add_scaled(column, rows, weight, scores, started)
            else:
                raw = weigher.raw(ctx, rows)
                if raw.dtype != np.float64:
                    return None
                status = kernels.add_scaled(raw, self._identity(m), weight, scores, started)
            if status < 0:
                return None
            started = started or status > 0
        if not started:  # every weigher's values are all equal: every host ties
            scores.fill(0.0)
        return scores

    def _identity(self, m: int) -> I64:
        """``arange(m)`` (a read-only view of one kept array): the rows of raw values."""
        if self._arange.size < m:
            self._arange = np.arange(max(m, 2 * self._arange.size), dtype=np.int64)
            self._arange.flags.writeable = False
        return self._arange[:m]

    def _scores(self, ctx: Context, rows: I64, terms: list[Term] | None = None) -> F64:
        """Sum of weight x min-max scaled raw values (`normalise`), weigher by weigher.

        For float64 values the same operations in the same order as ``0 + weight *
        normalise(values) + ...``, with the extremes read at `argmin`/`argmax` (the same
        elements `min`/`max` return, NaN included, for a quarter of the cost). Steps that
        cannot change a value are skipped: a weigher whose values are all equal (its zeros add
        nothing), a weight of 1 (x * 1 == x), the zeros the first term is added to (0 + x == x;
        only the sign of a zero may differ, which no comparison sees), and a weight of -1 is a
        subtraction (s + -x == s - x). With `terms`, each weigher's `Term` is appended to it.
        """
        scores: F64 | None = None
        for weigher, weight in self.weighers:
            if terms is None and weigher.minval is None and weigher.constant(ctx):
                continue  # all equal: `normalise` gives zeros, which add nothing
            values = raw = weigher.raw(ctx, rows)
            if values.dtype != np.float64:  # keep the exact arithmetic of other dtypes
                term = weight * normalise(values)
                if terms is not None:
                    terms.append(Term(weigher, weight, raw, raw, raw.min(), raw.max(), term))
                if scores is None:  # as before: alone, the term itself; else a float64 sum
                    scores = term if len(self.weighers) == 1 else np.zeros(rows.size) + term
                else:
                    scores += term
                continue
            if weigher.minval is None:
                lo, hi = values[values.argmin()], values[values.argmax()]
            else:  # Nova: max(x, minval), then (x - minval) / (max - minval)
                values = np.maximum(values, weigher.minval)
                lo, hi = np.float64(weigher.minval), values[values.argmax()]
            if terms is not None:
                terms.append(Term(weigher, weight, raw, values, lo, hi, None))
            if hi <= lo:  # normalise gives zeros, and x + (+-0.0) == x: nothing to add
                continue
            scaled = np.subtract(values, lo)  # weight * normalise(values), in one buffer
            np.divide(scaled, hi - lo, out=scaled)
            if scores is None:
                if weight != 1.0:
                    np.multiply(scaled, weight, out=scaled)
                scores = scaled
            elif weight == 1.0:
                scores += scaled
            elif weight == -1.0:
                scores -= scaled
            else:
                np.multiply(scaled, weight, out=scaled)
                scores += scaled
        if scores is None:
            return np.zeros(rows.size, dtype=np.float64)
        return scores

    def _choose(
        self, ctx: Context, rows: I64, seed: int, step: int, why: WhyHook | None = None
    ) -> tuple[int, list[int]]:
        """The chosen row and up to max_attempts - 1 alternates (best first)."""
        terms: list[Term] | None = None if why is None else []
        scores = None
        if not self.weighers:
            scores = np.zeros(rows.size)
        elif why is None:  # no terms to keep: the compiled passes when they can
            scores = self._compiled_scores(ctx, rows)
        if scores is None:
            scores = self._scores(ctx, rows, terms)
        chosen, alternates = self._choose_scored(rows, scores, seed, step)
        if why is not None:
            why(Scored(ctx, rows, scores, tuple(terms or ()), step, chosen, tuple(alternates)))
        return chosen, alternates

    def _choose_scored(self, rows: I64, scores: F64, seed: int, step: int) -> tuple[int, list[int]]:
        want = min(rows.size, max(self.max_attempts, self.host_subset_size))
        if want < rows.size:
            top = np.argpartition(-scores, want - 1)[:want]
        else:
            top = np.arange(rows.size)
        order = top[np.argsort(-scores[top], kind="stable")]
        best = scores[order[0]]
        if self.host_subset_size > 1:
            pool = order[: self.host_subset_size]
        else:
            pool = order[scores[order] >= best - _TIE]
            if pool.size == want and want < rows.size:
                # every host in the top slice ties: draw from all tied hosts, not just the slice
                pool = np.flatnonzero(scores >= best - _TIE)
        pick = int(pool[_mix(seed, step, pool.size) % pool.size])
        rest = [int(r) for r in order if r != pick][: self.max_attempts - 1]
        return int(rows[pick]), [int(rows[r]) for r in rest]

    # ------------------------------------------------------------------ capacity
    def capacity(self, table: HostTable, flavor: str, now: float) -> I64:
        """How many more instances of `flavor` each host takes, as this scheduler would place them.

        Resources are counted NUMA-exactly (`numa.vector.count`); hosts that a request-independent
        filter rejects count 0; the instances-per-host limit caps the count.
        """
        demand = table.demand(flavor)
        ctx = Context(table, RequestSpec(flavor=flavor), demand, now)
        counts = table.resource_counts(flavor)
        eligible = self._eligible(ctx)
        for flt in self.filters:
            limit = flt.per_host_limit()
            if limit is not None:
                counts = np.minimum(counts, limit - table.n_instances.astype(np.int64))
        return np.where(eligible, np.maximum(counts, 0), 0)

    def capacity_eligible(self, table: HostTable, flavor: str, now: float) -> Mask:
        """Hosts where `capacity` may count `flavor` at all: the request-independent filters
        (and huge-page size), which no claim changes. The defragmentation planner uses it too."""
        ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), now)
        return np.array(self._eligible(ctx))  # the caller's own copy: it may write to it

    def _eligible(self, ctx: Context) -> Mask:
        """The request-independent part of the filters (read-only, see `_conjoin`)."""
        everyone = ctx.table.everyone()
        mask, owned = everyone, False
        for flt in self.filters:
            part = flt.mask(ctx) if flt.static else flt.static_part(ctx)
            if part is not None:
                mask, owned = _conjoin(mask, owned, part, everyone)
        return mask


class ChanceScheduler(FilterScheduler):
    """Nova's ChanceScheduler, made safe: a uniformly random host among those that fit."""

    def _choose(
        self, ctx: Context, rows: I64, seed: int, step: int, why: WhyHook | None = None
    ) -> tuple[int, list[int]]:
        pick = _mix(seed, step, rows.size) % rows.size
        rest = [
            int(rows[(pick + k) % rows.size]) for k in range(1, min(self.max_attempts, rows.size))
        ]
        if why is not None:
            why(Scored(ctx, rows, None, (), step, int(rows[pick]), tuple(rest)))
        return int(rows[pick]), rest

    def _pick(self, ctx: Context, rows: I64, seed: int, step: int) -> int:
        return int(rows[_mix(seed, step, rows.size) % rows.size])


def commit(table: HostTable, decision: Decision) -> None:
    """Apply a decision if every host it touches is still at the generation it read.

    All or nothing: on a stale generation or a claim that no longer fits, every claim made so
    far is undone exactly and the error is raised; the table is then as before.
    """
    for host, generation in decision.generations.items():
        current = int(table.generation[table.row(host)])
        if current != generation:
            raise StaleGenerationError(
                f"host {host!r} changed since the decision (generation {generation} -> {current})"
            )
    done: list[tuple[str, int]] = []
    try:
        for sel in decision.selections:
            row = table.row(sel.host)
            done.append((sel.instance_id, int(table.generation[row])))
            table.claim(
                sel.instance_id,
                sel.host,
                decision.request.flavor,
                sel.cell_use,
                sel.host_use,
                server_group=decision.request.server_group,
                project=decision.request.project,
            )
    except ClaimError:
        done.pop()
        for iid, generation in reversed(done):
            table.unclaim(iid, generation)
        raise
