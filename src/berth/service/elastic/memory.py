"""The control loop's memory in the store: each group's and cluster's backoff and hysteresis
history (`elastic_backoff`), so a restarted Berth neither retries a failing group or cluster at
once nor drains or starts inside a hysteresis window it forgot."""

from __future__ import annotations

from collections.abc import Mapping

from berth.elastic.state import FailureHistory, GroupHistory
from berth.store.elastic_rows import BackoffRow
from berth.store.repo import Store


def load_history(store: Store) -> tuple[dict[str, GroupHistory], dict[str, FailureHistory]]:
    groups: dict[str, GroupHistory] = {}
    clusters: dict[str, FailureHistory] = {}
    for r in store.elastic_backoff():
        boots = FailureHistory(r.failures, r.last_failure)
        if r.kind == "group":
            groups[r.name] = GroupHistory(r.last_start, r.last_drain, boots)
        else:
            clusters[r.name] = boots
    return groups, clusters


def history_rows(
    groups: Mapping[str, GroupHistory], clusters: Mapping[str, FailureHistory]
) -> list[BackoffRow]:
    """The rows to keep: a history that remembers nothing is not stored."""
    rows = [
        BackoffRow(
            "group", name, h.last_start, h.last_drain, h.boots.failures, h.boots.last_failure
        )
        for name, h in sorted(groups.items())
        if h != GroupHistory()
    ]
    rows += [
        BackoffRow("cluster", name, failures=h.failures, last_failure=h.last_failure)
        for name, h in sorted(clusters.items())
        if h != FailureHistory()
    ]
    return rows


def save_history(
    store: Store, groups: Mapping[str, GroupHistory], clusters: Mapping[str, FailureHistory]
) -> None:
    store.save_elastic_backoff(history_rows(groups, clusters))
