"""Why this host: each weigher's part of a placement's score, the weigher that decided, and ties.

`select_destinations(..., why=WhyRecorder(...))` hands this module, per instance, the scores the
engine computed and each weigher's raw values and extremes (`engine.Term`); nothing is weighed
twice. For the winner and the next `top - 1` candidates (the engine's alternates, best first)
each weigher's raw value, its normalised value and its contribution are redone per host with
the engine's own float64 operations, so they fold back to the engine's score bit for bit
(`fold`). Without a recorder the engine does none of this (docs/why.md).

Definitions (docs/why.md):

* normalised = (max(raw, minval) - lo) / (hi - lo) over all candidates of that instance (lo = the
  smallest value, or `minval` for Nova's weighers; 0 when every candidate has the same value);
  contribution = multiplier x normalised; score = the contributions added left to right in
  configured order, weighers whose values are all equal left out (they add nothing).
* tie: the hosts whose score is within `kernels.TIE` (1e-9) of the best are a tie; the engine
  draws the winner among them with the request's seed.
* decided by: with no tie, the weigher whose contribution differs most in the winner's favour
  between the winner and the runner-up (the best-scoring other candidate): the largest
  share of the margin; `needed` says whether without that weigher's two contributions the
  runner-up would have scored at least as much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from berth.core import kernels
from berth.core.engine import Decision, FilterScheduler, Scored, Term
from berth.core.request import RequestSpec
from berth.core.table import HostTable

TIE = kernels.TIE
DEFAULT_TOP = 3
"""Candidates shown per instance by default: the winner and the engine's two alternates."""

DRAWS = {
    "best": "the best score, no tie",
    "tie": "a tie for the best score, drawn with the seed",
    "subset": "drawn with the seed among the host_subset_size best",
    "chance": "drawn uniformly with the seed (the chance scheduler weighs nothing)",
    "only": "the only candidate",
}


class Scale(NamedTuple):
    """How one weigher was scaled over an instance's candidates."""

    weigher: str
    multiplier: float
    lo: float
    hi: float
    constant: bool
    """Every candidate had the same value: the weigher added nothing."""
    dtype: str = "float64"
    """Of the raw values; the engine adds a float64 weigher's all-equal values as nothing and
    other dtypes' as they are (zeros)."""


class Part(NamedTuple):
    """One weigher's part of one candidate's score."""

    weigher: str
    raw: float
    normalised: float
    multiplier: float
    contribution: float


class Candidate(NamedTuple):
    host: str
    score: float
    """The score the engine computed (`fold` of the parts gives it back bit for bit)."""
    parts: tuple[Part, ...]


class _Column(NamedTuple):
    """One weigher's numbers at the shown candidates, gathered in the hook (plain lists; the
    extremes as the engine had them, made a `Scale` when read)."""

    weigher: str
    weight: float
    lo: float
    hi: float
    dtype: str | None
    """Of the raw values when the engine added a `term` array (None: float64)."""
    raws: list[float]
    values: list[float]
    term: list[float] | None

    @property
    def scale(self) -> Scale:
        lo, hi = float(self.lo), float(self.hi)
        dtype = self.dtype or "float64"
        return Scale(self.weigher, float(self.weight), lo, hi, not hi > lo, dtype)


@dataclass(frozen=True)
class InstanceWhy:
    """Why one instance of a request went where it went.

    The hook gathers the shown candidates' numbers (`_Column`); the parts, deltas and the
    deciding weigher are worked out from them when first read, so a decision that is never
    printed pays for the gathering only."""

    instance: int
    instance_id: str
    candidates: int
    """Hosts that passed every filter."""
    draw: str
    """A key of `DRAWS`."""
    tied: int
    """Hosts within `TIE` of the best score (1 when no tie)."""
    seed: int
    margin: float | None
    """Winner's score minus the runner-up's (None without a runner-up)."""
    hosts: tuple[str, ...] = field(repr=False)
    scores: tuple[float, ...] = field(repr=False)
    columns: tuple[_Column, ...] = field(repr=False)

    @cached_property
    def scales(self) -> tuple[Scale, ...]:
        return tuple(c.scale for c in self.columns)

    @cached_property
    def ranked(self) -> tuple[Candidate, ...]:
        """The winner first, then the best-scoring others in the engine's order."""
        parts = [_parts(c) for c in self.columns]  # per weigher, per candidate
        return tuple(
            Candidate(host, self.scores[i], tuple(col[i] for col in parts))
            for i, host in enumerate(self.hosts)
        )

    @cached_property
    def deltas(self) -> dict[str, float]:
        """Per weigher: its contribution to the winner minus to the runner-up."""
        if self.margin is None:
            return {}
        win, run = self.ranked[0], self.ranked[1]
        return {
            a.weigher: a.contribution - b.contribution
            for a, b in zip(win.parts, run.parts, strict=True)
        }

    @property
    def decided_by(self) -> str | None:
        """With draw "best": the weigher with the largest share of the margin (the first in
        configured order of equals)."""
        if self.draw != "best" or not self.deltas:
            return None
        return max(self.deltas, key=lambda k: self.deltas[k])

    @property
    def needed(self) -> bool | None:
        """Whether the order flips (or ties) without `decided_by`'s contributions."""
        name = self.decided_by
        if name is None or self.margin is None:
            return None
        return self.margin - self.deltas[name] <= TIE

    @property
    def winner(self) -> Candidate:
        return self.ranked[0]

    def summary(self) -> str:
        """One line: where, why, and how close."""
        head = f"{self.instance_id} -> {self.hosts[0]} ({self.candidates} candidates)"
        decided_by = self.decided_by
        if decided_by is not None and self.margin is not None:
            runner = self.hosts[1]
            share = self.deltas[decided_by]
            return (
                f"{head}: beat {runner} by {self.margin:.6g}, decided by {decided_by} "
                f"({share:+.6g} of the margin; "
                + (
                    "without it the runner-up would win or tie)"
                    if self.needed
                    else "the winner leads without it too)"
                )
            )
        if self.draw == "tie":
            return f"{head}: {self.tied}-way tie for the best score, drawn with seed {self.seed}"
        return f"{head}: {DRAWS[self.draw]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "instance_id": self.instance_id,
            "candidates": self.candidates,
            "ranked": [
                {"host": c.host, "score": c.score, "parts": [p._asdict() for p in c.parts]}
                for c in self.ranked
            ],
            "scales": [sc._asdict() for sc in self.scales],
            "draw": self.draw,
            "tied": self.tied,
            "seed": self.seed,
            "margin": self.margin,
            "decided_by": self.decided_by,
            "needed": self.needed,
            "deltas": dict(self.deltas),
            "summary": self.summary(),
        }


def fold(parts: Sequence[Part], scales: Sequence[Scale]) -> float:
    """The engine's sum of a candidate's parts (`FilterScheduler._scores`): left to right,
    leaving out the all-equal float64 weighers; a first term of another dtype is added to 0.0
    unless it is the scheduler's only weigher."""
    total: float | None = None
    for part, scale in zip(parts, scales, strict=True):
        exact = scale.dtype == "float64"
        if exact and scale.constant:
            continue
        c = part.contribution
        first = c if exact or len(scales) == 1 else 0.0 + c
        total = first if total is None else total + c
    return 0.0 if total is None else total


class WhyRecorder:
    """A `engine.WhyHook` that keeps one `InstanceWhy` per instance in `instances`."""

    def __init__(self, scheduler: FilterScheduler, request: RequestSpec, top: int = DEFAULT_TOP):
        if top < 2:
            raise ValueError("top: show at least the winner and the runner-up (2)")
        self.scheduler = scheduler
        self.request = request
        self.top = top
        self.instances: list[InstanceWhy] = []
        self._ids = request.ids()  # once: generated ids are rebuilt on every call

    def __call__(self, scored: Scored) -> None:
        self.instances.append(self._explain(scored))

    def _explain(self, scored: Scored) -> InstanceWhy:
        rows, scores = scored.rows, scored.scores
        names = scored.ctx.table.names
        at = self._ranked_positions(scored)
        score_of: list[float] = [0.0] * at.size if scores is None else scores.take(at).tolist()
        draw, tied, margin = "only", 1, None
        if scores is None:
            draw, tied = "chance", int(rows.size)
        elif at.size > 1:
            best = max(score_of[0], score_of[1])
            if score_of[1] >= best - TIE:  # the runner-up is the best of the others: count
                tied = int(np.count_nonzero(scores >= best - TIE))
            margin = score_of[0] - score_of[1]
            if self.scheduler.host_subset_size > 1:
                draw = "subset"
            else:
                draw = "tie" if tied > 1 else "best"
        return InstanceWhy(
            instance=scored.step + 1,
            instance_id=self._ids[scored.step],
            candidates=int(rows.size),
            draw=draw,
            tied=tied,
            seed=self.request.seed,
            margin=margin,
            hosts=tuple(map(names.__getitem__, rows.take(at).tolist())),
            scores=tuple(score_of),
            columns=tuple(_column(t, at) for t in scored.terms),
        )

    def _ranked_positions(self, scored: Scored) -> npt.NDArray[np.int64]:
        """Positions (in `scored.rows`) of the winner and the next best: the engine's
        alternates when they are enough, else ranked from the scores (stable, as the engine)."""
        rows = scored.rows
        want = min(self.top, int(rows.size))
        found = rows.searchsorted((scored.chosen, *scored.alternates))
        if found.size >= want or scored.scores is None:
            return found[:want]
        chosen = int(found[0])
        scores = scored.scores
        k = min(want + 1, int(rows.size))
        top = np.argpartition(-scores, k - 1)[:k] if k < rows.size else np.arange(rows.size)
        order = top[np.argsort(-scores[top], kind="stable")]
        rest = [int(p) for p in order if p != chosen][: want - 1]
        return np.array([chosen, *rest], dtype=np.int64)


def _column(t: Term, at: npt.NDArray[np.int64]) -> _Column:
    """Weigher `t`'s numbers at candidate positions `at` (a few gathers, no arithmetic)."""
    raws: list[float] = t.raw.take(at).tolist()
    values: list[float] = raws if t.values is t.raw else t.values.take(at).tolist()
    if t.term is None:
        return _Column(t.weigher.name, t.weight, t.lo, t.hi, None, raws, values, None)
    term: list[float] = t.term.take(at).tolist()
    return _Column(t.weigher.name, t.weight, t.lo, t.hi, t.raw.dtype.name, raws, values, term)


def _parts(c: _Column) -> list[Part]:
    """One weigher's parts at the shown candidates, in the engine's arithmetic: Python floats
    are IEEE doubles, so ``(v - lo) / (hi - lo) * weight`` gives the engine's bits."""
    sc = c.scale
    name, weight, lo, hi = sc.weigher, sc.multiplier, sc.lo, sc.hi
    raws = [float(r) for r in c.raws]
    if c.term is not None:  # another dtype: the engine's own term array (normalised shown)
        span = hi - lo
        norm = [(float(v) - lo) / span if span > 0 else 0.0 for v in c.values]
        return [
            Part(name, r, n, weight, float(x)) for r, n, x in zip(raws, norm, c.term, strict=True)
        ]
    if not hi > lo:
        return [Part(name, r, 0.0, weight, 0.0) for r in raws]
    span = hi - lo
    scaled = [(v - lo) / span for v in c.values]
    if weight == 1.0:
        return [Part(name, r, x, weight, x) for r, x in zip(raws, scaled, strict=True)]
    return [Part(name, r, x, weight, x * weight) for r, x in zip(raws, scaled, strict=True)]


def explain_placement(
    scheduler: FilterScheduler,
    table: HostTable,
    request: RequestSpec,
    now: float,
    top: int = DEFAULT_TOP,
) -> tuple[Decision, list[InstanceWhy]]:
    """`select_destinations` and why, instance by instance (raises `NoValidHost` as it does)."""
    recorder = WhyRecorder(scheduler, request, top)
    decision = scheduler.select_destinations(table, request, now, why=recorder)
    return decision, recorder.instances
