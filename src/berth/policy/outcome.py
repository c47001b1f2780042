"""The pipeline's request and its answers: a `Placement` or an explained `Failure`.

Both carry what explains them: the cluster rejections of the pre-check and the (variant,
cluster) attempts of the placement and preemption steps (docs/policy.md, "The pipeline").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from berth.core.engine import Decision
from berth.core.explain import Diagnosis
from berth.core.model import Name
from berth.policy.catalogue import Candidates
from berth.policy.model import Business
from berth.policy.preemption import PreemptionPlan


class ScheduleRequest(BaseModel):
    """A user's request: N instances of a base flavor in a region, for a business type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: Name = Field(description="a region, or one IDC by name")
    flavor: Name = Field(description="a base flavor of the catalogue (e.g. v.c3.large)")
    count: Annotated[int, Field(ge=1, le=1000)] = 1
    business: Business = Business.ON_DEMAND
    user: Name = "default"
    deployment_set: Name | None = None
    image: Name | None = None
    network: Name | None = None
    project: Name = "default"
    seed: int = 0
    instance_ids: tuple[Name, ...] | None = None


@dataclass(frozen=True)
class ClusterRejection:
    cluster: str
    idc: str
    step: str
    code: str
    message: str


@dataclass(frozen=True)
class Attempt:
    """One (variant, cluster) considered by the placement or preemption step."""

    variant: str
    flavor: str
    pool: str
    cluster: str
    pool_hosts: int
    capacity: int
    """Instances of the flavor the cluster's pool can still take (per the core's capacity, and
    at most one per host, or per rack, for a deployment set)."""
    outcome: str
    message: str = ""
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class Placement:
    request: ScheduleRequest
    region: str
    idc: str
    cluster: str
    pool: str
    variant: str
    flavor: str
    network: str | None
    decision: Decision
    candidates: Candidates
    plan: PreemptionPlan | None = None
    attempts: tuple[Attempt, ...] = ()
    rejections: tuple[ClusterRejection, ...] = ()

    @property
    def ok(self) -> bool:
        return True

    @property
    def hosts(self) -> list[str]:
        return self.decision.hosts

    @property
    def instance_ids(self) -> list[str]:
        return [s.instance_id for s in self.decision.selections]

    @property
    def evictions(self) -> tuple[str, ...]:
        return self.plan.evictions if self.plan is not None else ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": True,
            "region": self.region,
            "idc": self.idc,
            "cluster": self.cluster,
            "pool": self.pool,
            "variant": self.variant,
            "flavor": self.flavor,
            "network": self.network,
            "candidates": [c.variant for c in self.candidates.items],
            "candidate_rule": self.candidates.rule,
            "instances": [
                {"id": s.instance_id, "host": s.host, "alternates": list(s.alternates)}
                for s in self.decision.selections
            ],
            "evictions": [],
        }
        if self.plan is not None:
            out["evictions"] = [
                {
                    "id": v.instance_id,
                    "host": v.host,
                    "flavor": v.flavor,
                    "created_at": v.created_at,
                }
                for v in self.plan.victims
            ]
            out["preemption"] = {
                "search": self.plan.search,
                "idle": self.plan.idle,
                "lost_seconds": self.plan.lost_seconds,
            }
        out["attempts"] = [_attempt_dict(a) for a in self.attempts]
        out["rejections"] = [_rejection_dict(r) for r in self.rejections]
        return out


@dataclass(frozen=True)
class Failure:
    request: ScheduleRequest
    step: str
    code: str
    message: str
    candidates: Candidates | None = None
    attempts: tuple[Attempt, ...] = ()
    rejections: tuple[ClusterRejection, ...] = ()

    @property
    def ok(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": False,
            "step": self.step,
            "code": self.code,
            "message": self.message,
            "candidates": [c.variant for c in self.candidates.items] if self.candidates else [],
            "attempts": [_attempt_dict(a) for a in self.attempts],
            "rejections": [_rejection_dict(r) for r in self.rejections],
        }


@dataclass(frozen=True)
class Eviction:
    instance_id: str
    cluster: str
    host: str
    flavor: str
    user: str
    for_request: tuple[str, ...]


@dataclass(frozen=True)
class Committed:
    placement: Placement
    instance_ids: tuple[str, ...]
    evicted: tuple[Eviction, ...] = field(default=())


Outcome = Placement | Failure


def failure(
    request: ScheduleRequest,
    step: str,
    rejections: list[ClusterRejection],
    cands: Candidates | None,
    attempts: list[Attempt] | None,
) -> Failure:
    """The failure of a step, with a one-line message that counts what was rejected."""
    if step in ("precheck", "preemptible_limit"):
        codes = sorted({r.code for r in rejections if r.step == step} or {"no_cluster"})
        code = codes[0] if len(codes) == 1 else "no_candidate_cluster"
        if step == "preemptible_limit":
            code = "preemptible_limit"
        counts: dict[str, int] = {}
        for r in rejections:
            counts[r.code] = counts.get(r.code, 0) + 1
        parts = [f"{n} {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        message = f"0/{len(rejections)} clusters in {request.region} pass: " + ", ".join(parts)
        return Failure(request, step, code, message, cands, (), tuple(rejections))
    tried = attempts or []
    where = ", ".join(
        f"{a.cluster}/{a.variant}: {a.capacity} fit"
        for a in tried
        if a.outcome != "preemption_plan"
    )
    extra = (
        " (no eviction of preemptible instances frees enough room)" if step == "preemption" else ""
    )
    message = (
        f"no cluster in {request.region} can take {request.count} x {request.flavor}{extra}"
        + (f" [{where}]" if where else "")
    )
    return Failure(request, step, "no_capacity", message, cands, tuple(tried), tuple(rejections))


def _attempt_dict(a: Attempt) -> dict[str, Any]:
    out: dict[str, Any] = {
        "variant": a.variant,
        "flavor": a.flavor,
        "pool": a.pool,
        "cluster": a.cluster,
        "pool_hosts": a.pool_hosts,
        "capacity": a.capacity,
        "outcome": a.outcome,
        "message": a.message,
    }
    if a.diagnosis is not None:
        out["diagnosis"] = a.diagnosis.to_dict()
    return out


def _rejection_dict(r: ClusterRejection) -> dict[str, Any]:
    return {
        "cluster": r.cluster,
        "idc": r.idc,
        "step": r.step,
        "code": r.code,
        "message": r.message,
    }
