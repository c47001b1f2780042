"""Give each "VM" a simulated cloud boots a real batch worker, and take it away on delete.

`WorkerLauncher.on_boot` and `on_delete` are the `SimulatedCloud` hooks (berth.cloud.simulated):
a booted server gets a worker named after it (`Server.name`), with as many CPUs as its flavor
has, in the drain group until the `berth agent` joins it to its group's queue; a deleted server's
worker is stopped. On a real cloud the VM's own boot starts its batch daemon and this is unused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from berth.cloud.driver import Server
from berth.elastic.workers.base import BatchWorker


class WorkerLauncher:
    def __init__(self, workers: BatchWorker, flavor_cpus: Mapping[str, int]) -> None:
        self.workers = workers
        self.flavor_cpus = dict(flavor_cpus)
        self.errors: list[tuple[str, Exception]] = []  # (server name, what failed), for reports

    def on_boot(self, server: Server) -> None:
        cpus = self.flavor_cpus.get(server.flavor)
        if cpus is None:
            self.errors.append((server.name, ValueError(f"flavor {server.flavor!r}: no CPUs")))
            return
        self._guard(server.name, lambda: self.workers.start(server.name, cpus))

    def on_delete(self, server: Server) -> None:
        self._guard(server.name, lambda: self.workers.stop(server.name))

    def _guard(self, name: str, action: Callable[[], None]) -> None:
        # A worker that fails to start is a VM that never joins: the controller's boot deadline
        # reaps it. The hook must not break the cloud's own bookkeeping.
        try:
            action()
        except Exception as exc:
            self.errors.append((name, exc))
