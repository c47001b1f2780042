"""The interface every way of placing implements: decide on the cache, say what to commit.

A decider (`plain.PlainDecider` for `/v1/placements`, `multicloud.MultiCloudDecider` for
`/v1/schedule`) only chooses; `commit.commit_with_retries` holds the hosts, commits through the
store and retries, the same way for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from berth.core.why import InstanceWhy
from berth.service.replica import Replica
from berth.store.repo import CommitResult, HostCapacity, NewInstance


class Result(Protocol):
    """What a placement returns (`Placed`, `Scheduled`): the commit and the stored answer."""

    commit: CommitResult
    response: dict[str, Any] | None


R = TypeVar("R", bound=Result)
Q_contra = TypeVar("Q_contra", contravariant=True)


@dataclass(frozen=True)
class Attempt:
    """Which placement and which of its attempts a decision is for."""

    placement_id: str
    number: int


@dataclass
class Plan(Generic[R]):
    """A decision ready to commit: the result to return and what the store must verify."""

    result: R
    instances: list[NewInstance]
    host_generations: dict[str, int]
    """Every touched host (placed on or evicted from) and the generation the decision read."""
    group_generations: dict[str, int]
    capacities: dict[str, HostCapacity]
    flavor: str
    project: str
    count: int
    evictions: tuple[str, ...] = ()
    preemptible_limit: tuple[str, int] | None = None
    why: Sequence[InstanceWhy] | None = None
    """The choice explained (asked, or `ServiceConfig.why_all`): its outcome row keeps it in
    compact form (`placing.why_record`), built after the decision's lock is let go."""

    @property
    def touched(self) -> set[str]:
        return set(self.host_generations)


class Decider(Protocol[Q_contra, R]):
    def decide(self, views: Replica, request: Q_contra, attempt: Attempt) -> Plan[R]:
        """Choose on the replica's tables (caller holds `views.lock`; the cache is loaded and
        the chosen hosts are marked as having a commit in flight only after this returns)."""
        ...
