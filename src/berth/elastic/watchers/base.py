"""The one interface the controller's loop reads batch queues through.

A watcher turns a batch system's jobs and workers into a `QueueSnapshot`: per Berth group, the
idle jobs that would start if a slot appeared (`idle_jobs`), the running ones, and the idle ones
that need no VM (`held_jobs`: held, waiting on a dependency, or kept idle by the group's own
batch quota or account limit); per VM, the worker its batch system sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from berth.elastic.model import QueueSelector, QueueSnapshot


class QueueWatcher(Protocol):
    """Reads one batch system; `groups` maps Berth group names to the jobs that are theirs."""

    groups: Mapping[str, QueueSelector]

    def snapshot(self) -> QueueSnapshot: ...
