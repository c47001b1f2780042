"""Backoff and hysteresis memory: what the controller needs to remember between cycles.

`effective_backoff` folds this cycle's failed boots into the stored history before deciding
(a group whose boot just timed out backs off from now). `advance_history` is what the loop calls
after carrying a decision out: starts and drains stamp the group's hysteresis clock, failed
boots count against the group and the VM's cluster, and a VM that joined since the last failure
resets the count.
"""

from __future__ import annotations

import numpy as np

from berth.elastic.actions import Code, Decision, Drain, Reap, Start
from berth.elastic.model import VmState
from berth.elastic.state import (
    Bool,
    ControllerConfig,
    ControlState,
    FailureHistory,
    GroupHistory,
    VmTable,
)


def _bump(h: FailureHistory, failures: int, now: float) -> FailureHistory:
    if failures <= 0:
        return h
    return FailureHistory(h.failures + failures, now)


def effective_backoff(
    state: ControlState, config: ControllerConfig, t: VmTable, failed: Bool
) -> tuple[list[float | None], list[str]]:
    """Per group the time its backoff ends (None when not backing off); the open clusters."""
    n = len(state.groups)
    gi = t.group[failed]
    per_group = np.bincount(gi[gi >= 0], minlength=n)
    ends: list[float | None] = []
    for g, spec in enumerate(state.groups):
        h = state.history.get(spec.name, GroupHistory()).boots
        until = _bump(h, int(per_group[g]), state.now).backoff_until(config)
        ends.append(until if until is not None and state.now < until else None)
    codes = t.cluster_code[failed]
    counts = np.bincount(codes[codes >= 0], minlength=len(t.cluster_names))
    per_cluster = {c: int(n) for c, n in zip(t.cluster_names, counts, strict=True) if n}
    open_clusters = []
    for cl in sorted(state.room):
        h = _bump(state.clusters.get(cl, FailureHistory()), per_cluster.get(cl, 0), state.now)
        until = h.backoff_until(config)
        if until is None or state.now >= until:
            open_clusters.append(cl)
    return ends, open_clusters


def advance_history(
    state: ControlState, decision: Decision
) -> tuple[dict[str, GroupHistory], dict[str, FailureHistory]]:
    """The group and cluster history after `decision` is carried out at `decision.now`."""
    now = decision.now
    groups = dict(state.history)
    clusters = dict(state.clusters)
    for v in state.vms:  # a VM that joined after the last failure resets the count
        if v.state in (VmState.JOINED, VmState.DRAINING):
            h = groups.get(v.group, GroupHistory())
            last = h.boots.last_failure
            if h.boots.failures and last is not None and v.since >= last:
                groups[v.group] = GroupHistory(h.last_start, h.last_drain, FailureHistory())
            if v.cluster is not None:
                ch = clusters.get(v.cluster)
                if ch is not None and ch.last_failure is not None and v.since >= ch.last_failure:
                    clusters[v.cluster] = FailureHistory()
    for a in decision.actions:
        h = groups.get(a.group, GroupHistory())
        if isinstance(a, Start):
            groups[a.group] = GroupHistory(now, h.last_drain, h.boots)
        elif isinstance(a, Drain) and a.reason.code in (Code.IDLE, Code.OVER_QUOTA):
            groups[a.group] = GroupHistory(h.last_start, now, h.boots)
        elif isinstance(a, Reap) and a.outcome is VmState.FAILED:
            groups[a.group] = GroupHistory(h.last_start, h.last_drain, _bump(h.boots, 1, now))
            if a.cluster is not None:
                ch = clusters.get(a.cluster, FailureHistory())
                clusters[a.cluster] = _bump(ch, 1, now)
    return groups, clusters
