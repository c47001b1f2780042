"""What the `berth agent` and the VM launcher do to a VM's batch daemon.

A worker is started in the drain group (it takes no job) and joins a group's queue when told;
`leave` moves it back to the drain group (`model.DRAIN_GROUP`): it finishes its running jobs
and takes no new one, and `running_jobs` says when it is empty. `stop` shuts the daemon down
and removes it from the batch system. Every method names the VM; implementations keep what they
need on disk, so the launcher and the agent may be different processes.
"""

from __future__ import annotations

from typing import Protocol

from berth.elastic.model import BatchSystem, QueueSelector


class BatchWorker(Protocol):
    system: BatchSystem

    def start(self, vm: str, cpus: int) -> None:
        """Start the VM's batch daemon, in the drain group; idempotent."""

    def join(self, vm: str, queue: QueueSelector) -> None:
        """Serve `queue`'s jobs from now on."""

    def leave(self, vm: str) -> None:
        """Move to the drain group: running jobs go on, no new job starts."""

    def running_jobs(self, vm: str) -> int:
        """Jobs running on the VM now, as the batch system reports them."""

    def stop(self, vm: str) -> None:
        """Shut the daemon down and take the VM out of the batch system; idempotent."""

    def workers(self) -> list[str]:
        """The VMs whose daemons this worker manager started and has not stopped."""
