"""Success-rate accounting (B11): requests, successes and failures per day, per business type
and per failure reason. Time is passed in (epoch seconds, days in UTC); nothing reads a clock.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def day_of(now: float) -> str:
    return dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime("%Y-%m-%d")


@dataclass
class DayCounts:
    requests: int = 0
    successes: int = 0
    failures: int = 0
    instances: int = 0
    """Instances created (a request for N counts N when it succeeds)."""
    evictions: int = 0
    by_business: Counter[str] = field(default_factory=Counter)
    failures_by_business: Counter[str] = field(default_factory=Counter)
    failures_by_reason: Counter[str] = field(default_factory=Counter)

    @property
    def success_rate(self) -> float:
        return self.successes / self.requests if self.requests else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "successes": self.successes,
            "failures": self.failures,
            "success_rate": round(self.success_rate, 6),
            "instances": self.instances,
            "evictions": self.evictions,
            "requests_by_business": dict(sorted(self.by_business.items())),
            "failures_by_business": dict(sorted(self.failures_by_business.items())),
            "failures_by_reason": dict(sorted(self.failures_by_reason.items())),
        }


class Accounting:
    def __init__(self) -> None:
        self.days: dict[str, DayCounts] = {}

    def record(
        self,
        now: float,
        business: str,
        ok: bool,
        *,
        reason: str | None = None,
        instances: int = 0,
        evictions: int = 0,
    ) -> None:
        day = self.days.setdefault(day_of(now), DayCounts())
        day.requests += 1
        day.by_business[business] += 1
        if ok:
            day.successes += 1
            day.instances += instances
            day.evictions += evictions
        else:
            day.failures += 1
            day.failures_by_business[business] += 1
            day.failures_by_reason[reason or "unknown"] += 1

    def total(self) -> DayCounts:
        out = DayCounts()
        for day in self.days.values():
            out.requests += day.requests
            out.successes += day.successes
            out.failures += day.failures
            out.instances += day.instances
            out.evictions += day.evictions
            out.by_business.update(day.by_business)
            out.failures_by_business.update(day.failures_by_business)
            out.failures_by_reason.update(day.failures_by_reason)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "days": {d: c.to_dict() for d, c in sorted(self.days.items())},
            "total": self.total().to_dict(),
        }
