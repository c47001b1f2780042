"""Explained failures: which filter rejected how many hosts, and why.

Each host is attributed to the first filter (in configured order) that rejects it, and within
that filter to the first reason that applies, so the counts add up to the fleet size. The text
form reads like kube-scheduler's: "0/1200 hosts fit: 700 no NUMA cell with 16 free pinned CPUs,
300 lack trait CUSTOM_POOL_DPDK, 200 disabled".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from berth.core.errors import BerthError
from berth.core.filters.base import Context, HostFilter


@dataclass(frozen=True)
class ReasonCount:
    code: str
    message: str
    hosts: int
    filter: str
    resource: str | None = None
    requested: float | None = None
    best_free: float | None = None


@dataclass(frozen=True)
class Diagnosis:
    total_hosts: int
    reasons: tuple[ReasonCount, ...]
    instance: int = 1
    num_instances: int = 1
    flavor: str = ""

    def __str__(self) -> str:
        parts = [f"{r.hosts} {r.message}" for r in self.reasons]
        head = f"0/{self.total_hosts} hosts fit"
        if self.num_instances > 1:
            head = f"instance {self.instance} of {self.num_instances}: {head}"
        return head + (": " + ", ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": str(self),
            "flavor": self.flavor,
            "total_hosts": self.total_hosts,
            "instance": self.instance,
            "num_instances": self.num_instances,
            "reasons": [asdict(r) for r in self.reasons],
        }


class NoValidHost(BerthError):  # noqa: N818 - Nova's name, kept on purpose
    """No host fits; `diagnosis` says why, host by host count."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(str(diagnosis))
        self.diagnosis = diagnosis


def diagnose(ctx: Context, filters: Sequence[HostFilter], instance: int = 1) -> Diagnosis:
    n = len(ctx.table)
    remaining = np.ones(n, dtype=bool)
    found: list[ReasonCount] = []
    for flt in filters:
        passed = flt.mask(ctx)
        failed = remaining & ~passed
        if failed.any():
            for rejection, hosts in flt.explain(ctx, failed):
                hosts = hosts & failed
                count = int(hosts.sum())
                if count == 0:
                    continue
                best = None
                if rejection.free is not None:
                    best = float(rejection.free[hosts].max())
                found.append(
                    ReasonCount(
                        code=rejection.code,
                        message=rejection.message,
                        hosts=count,
                        filter=flt.name,
                        resource=rejection.resource,
                        requested=rejection.requested,
                        best_free=best,
                    )
                )
        remaining &= passed
    found.sort(key=lambda r: -r.hosts)  # stable: ties keep filter order
    return Diagnosis(
        total_hosts=n,
        reasons=tuple(found),
        instance=instance,
        num_instances=ctx.request.num_instances,
        flavor=ctx.request.flavor,
    )
