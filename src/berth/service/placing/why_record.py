"""The compact "why this host" a placement's outcome row keeps, for the decision stream.

`core.why.InstanceWhy.to_dict` is the API's answer: per candidate a list of part objects, the
scales, the deltas. The outcome log keeps less, once per placement (docs/why.md, "In the
decision stream"): the weigher names and multipliers once, then per instance the kind of draw,
the margin over the runner-up, the deciding weigher and its share of the margin, and per shown
candidate its score and three parallel lists (raw, normalised, part) in weigher order. Every
number is the `InstanceWhy`'s own float, so the stored score still folds back bit for bit.

A placement of many instances keeps its first `STORED_INSTANCES` (`instances_total` says how
many there were), so one row stays a few kilobytes whatever the count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from berth.core.why import InstanceWhy

VERSION = 1
STORED_INSTANCES = 10


def compact(instances: Sequence[InstanceWhy]) -> dict[str, Any] | None:
    """The outcome row's `why` for a placement's explained instances (None for none)."""
    if not instances:
        return None
    scales = instances[0].scales
    return {
        "v": VERSION,
        "top": max(len(w.hosts) for w in instances),
        "weighers": [s.weigher for s in scales],
        "multipliers": [s.multiplier for s in scales],
        "instances_total": len(instances),
        "instances": [_instance(w) for w in instances[:STORED_INSTANCES]],
    }


def _instance(w: InstanceWhy) -> dict[str, Any]:
    decided_by = w.decided_by
    return {
        "id": w.instance_id,
        "host": w.hosts[0],
        "candidates": w.candidates,
        "draw": w.draw,
        "tied": w.tied,
        "seed": w.seed,
        "margin": w.margin,
        "decided_by": decided_by,
        "share": None if decided_by is None else w.deltas[decided_by],
        "needed": w.needed,
        "summary": w.summary(),
        "constant": [s.constant for s in w.scales],
        "ranked": [
            {
                "host": c.host,
                "score": c.score,
                "raw": [p.raw for p in c.parts],
                "norm": [p.normalised for p in c.parts],
                "part": [p.contribution for p in c.parts],
            }
            for c in w.ranked
        ],
    }
