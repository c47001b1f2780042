"""What the controller decides, and why: actions, the reasons for them, and per-group notes.

Every action carries a `Reason`; every group gets a `GroupReport` that says what it needed, what
it got and, for what it did not get, which rule held it back (`Note`s with the number of VMs each
rule withheld), in the spirit of `berth.core.explain`: the notes of a group add up to what it
asked for and did not receive.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from berth.elastic.model import VmState


class Code(StrEnum):
    """Stable reason codes (do not reuse or rename: the API and the logs carry them)."""

    # why an action was taken
    DEMAND = "demand"  # idle jobs beyond the free slots
    MIN_VMS = "min_vms"  # the group is below its minimum
    IDLE = "idle"  # idle past the keep-alive, no demand for it
    OVER_QUOTA = "over_quota"  # the group holds more than its max_vms / max_cores
    EVICTED = "evicted"  # Berth's placement marked the VM for eviction (on-demand user)
    DRAINED = "drained"  # a draining VM finished its jobs
    DRAIN_DEADLINE = "drain_deadline"  # a draining VM ran past its deadline: forced
    BOOT_DEADLINE = "boot_deadline"  # never joined in time: a failed boot
    HEARTBEAT_STALE = "heartbeat_stale"  # its agent went silent: lost
    # why something was not done (notes)
    AT_MAX = "at_max"  # the group's max_vms / max_cores
    GLOBAL_CAP = "global_cap"  # the pool's global VM / core cap
    NO_ROOM = "no_room"  # no room for the flavor in any cluster that may be used
    FAIR_SHARE = "fair_share"  # the room went to groups with less than their share
    GROUP_BACKOFF = "group_backoff"  # recent failed boots of this group
    CLUSTER_BACKOFF = "cluster_backoff"  # every cluster with room is backing off
    HYSTERESIS = "hysteresis"  # the opposite move was made within the window
    RATE_LIMIT = "rate_limit"  # the per-cycle start/drain limit
    KEEP_ALIVE = "keep_alive"  # idle, but not yet for the keep-alive
    AT_MIN = "at_min"  # draining it would take the group below its minimum
    UNKNOWN_GROUP = "unknown_group"  # a VM or demand of a group with no spec


@dataclass(frozen=True)
class Reason:
    code: Code
    message: str


@dataclass(frozen=True)
class Start:
    """Boot `count` VMs of `group` (its flavor) on any of `clusters` (those not backing off)."""

    group: str
    count: int
    flavor: str
    clusters: tuple[str, ...]
    reason: Reason


@dataclass(frozen=True)
class Drain:
    """Move the VM's worker to the drain group (DRAIN_GROUP): it finishes its jobs, takes none."""

    vm: str
    group: str
    reason: Reason


@dataclass(frozen=True)
class Retire:
    """Delete a draining VM: its jobs ended (`force` False) or its drain deadline passed."""

    vm: str
    group: str
    force: bool
    reason: Reason


@dataclass(frozen=True)
class Reap:
    """Delete a VM that never joined (outcome FAILED, a failed boot) or went silent (LOST)."""

    vm: str
    group: str
    outcome: VmState
    cluster: str | None
    reason: Reason


Action = Start | Drain | Retire | Reap


@dataclass(frozen=True)
class Note:
    """A rule that held back `vms` VMs of a group (starts or drains), and why."""

    code: Code
    message: str
    vms: int = 0


@dataclass(frozen=True)
class GroupReport:
    """One group's arithmetic this cycle, and the notes on what it did not get."""

    group: str
    idle_jobs: int
    free_slots: int
    active_vms: int  # requested + booting + joined (draining excluded)
    draining_vms: int
    wanted: int  # VMs it asked for this cycle (demand or minimum, within its own quota)
    started: int
    drained: int
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Decision:
    now: float
    actions: tuple[Action, ...]
    groups: tuple[GroupReport, ...]

    def starts(self) -> list[Start]:
        return [a for a in self.actions if isinstance(a, Start)]

    def drains(self) -> list[Drain]:
        return [a for a in self.actions if isinstance(a, Drain)]

    def retires(self) -> list[Retire]:
        return [a for a in self.actions if isinstance(a, Retire)]

    def reaps(self) -> list[Reap]:
        return [a for a in self.actions if isinstance(a, Reap)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each action with its `kind`; enums as their values."""
        return {
            "now": self.now,
            "actions": [
                {"kind": type(a).__name__.lower(), **_plain(asdict(a))} for a in self.actions
            ],
            "groups": [_plain(asdict(r)) for r in self.groups],
        }

    def report(self, group: str) -> GroupReport:
        for r in self.groups:
            if r.group == group:
                return r
        raise KeyError(group)


def _plain(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
