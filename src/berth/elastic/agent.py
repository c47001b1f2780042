"""`berth agent`: the small program on each elastic VM (docs/elastic.md, "agent").

It holds the VM's own token (role `vm`: it can touch only this VM) and loops: every `interval`
seconds it reports a heartbeat with the batch worker's running job count, receives the VM's open
commands, carries each out on the VM's batch daemon through a `BatchWorker`
(`berth.elastic.workers`) and reports each result:

* `join` — serve the group's queue (`args.queue`, a queue selector);
* `leave` — move to the drain group G_none (running jobs go on, no new one starts);
* `reconfigure` — re-apply the worker's settings (a `queue` in the args joins that queue);
* `shutdown` — stop the batch daemon, take it out of the batch system, and exit.

When the service says the VM is finished (409 `vm_state`) or no longer knows the token (401),
the agent stops the worker and exits. When the service cannot be reached it keeps the worker as
it is and tries again: a stale heartbeat is for the service to judge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from berth.elastic.model import BatchSystem, QueueSelector

log = logging.getLogger("berth.agent")


class Worker(Protocol):
    """What the agent needs of a `BatchWorker`."""

    def start(self, vm: str, cpus: int) -> None: ...

    def join(self, vm: str, queue: QueueSelector) -> None: ...

    def leave(self, vm: str) -> None: ...

    def running_jobs(self, vm: str) -> int: ...

    def stop(self, vm: str) -> None: ...


@dataclass(frozen=True)
class AgentConfig:
    url: str
    vm: str
    token: str
    interval: float = 5.0
    cpus: int | None = None  # start the worker with this many CPUs first (None: it runs)
    timeout: float = 10.0


def queue_from(args: dict[str, Any]) -> QueueSelector:
    q = args.get("queue")
    if not isinstance(q, dict) or "system" not in q:
        raise ValueError("args.queue: the command names no queue to join")
    return QueueSelector(
        system=BatchSystem(q["system"]),
        accounting_group=q.get("accounting_group"),
        requirements=q.get("requirements"),
        partition=q.get("partition"),
        account=q.get("account"),
    )


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        worker: Worker,
        *,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.worker = worker
        self.client = client or httpx.Client(timeout=config.timeout)
        self.sleep = sleep
        self.finished = False
        self._headers = {"Authorization": f"Bearer {config.token}"}
        self._base = f"{config.url.rstrip('/')}/v1/elastic/vms/{config.vm}"

    def running_jobs(self) -> int:
        try:
            return max(0, int(self.worker.running_jobs(self.config.vm)))
        except Exception as exc:  # the batch system is slow to answer: report none
            log.warning("running jobs of %s: %s", self.config.vm, exc)
            return 0

    def step(self) -> bool:
        """One heartbeat and the commands it brought; False when the agent should stop."""
        try:
            resp = self.client.post(
                f"{self._base}/heartbeat",
                json={"running_jobs": self.running_jobs()},
                headers=self._headers,
            )
        except httpx.HTTPError as exc:
            log.warning("heartbeat of %s: %s", self.config.vm, exc)
            return True
        if resp.status_code in (401, 409):
            log.info("vm %s is finished (%s): stopping", self.config.vm, resp.text)
            self._stop_worker()
            return False
        if resp.status_code != 200:
            log.warning("heartbeat of %s: HTTP %s %s", self.config.vm, resp.status_code, resp.text)
            return True
        for cmd in resp.json().get("commands", []):
            ok, result = self.apply(cmd)
            self._report(cmd["id"], ok, result)
            if ok and cmd["kind"] == "shutdown":
                return False
        return True

    def apply(self, cmd: dict[str, Any]) -> tuple[bool, str]:
        """Carry one command out on the worker: (ok, what happened)."""
        vm, kind, args = self.config.vm, cmd["kind"], dict(cmd.get("args") or {})
        try:
            if kind == "join":
                queue = queue_from(args)
                self.worker.join(vm, queue)
                return True, f"joined {args.get('group')} ({queue.system.value})"
            if kind == "leave":
                self.worker.leave(vm)
                return True, "moved to the drain group"
            if kind == "reconfigure":
                if "queue" in args:
                    self.worker.join(vm, queue_from(args))
                    return True, "reconfigured: queue re-applied"
                return True, "nothing to reconfigure"
            if kind == "shutdown":
                self._stop_worker()
                return True, "worker stopped"
            return False, f"unknown command {kind!r}"
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    def _report(self, command_id: int, ok: bool, result: str) -> None:
        for attempt in range(3):
            try:
                resp = self.client.post(
                    f"{self._base}/commands/{command_id}/result",
                    json={"ok": ok, "result": result[-60000:]},
                    headers=self._headers,
                )
                if resp.status_code < 500:
                    return
            except httpx.HTTPError as exc:
                log.warning("result of command %s: %s", command_id, exc)
            self.sleep(0.5 * (attempt + 1))

    def _stop_worker(self) -> None:
        try:
            self.worker.stop(self.config.vm)
        except Exception as exc:
            log.warning("stopping the worker of %s: %s", self.config.vm, exc)
        self.finished = True

    def run(self, stop: threading.Event | None = None) -> None:
        """Loop until told to stop (by the service, or `stop`)."""
        stop = stop or threading.Event()
        if self.config.cpus is not None:
            self.worker.start(self.config.vm, self.config.cpus)
        while not stop.is_set():
            if not self.step():
                return
            stop.wait(self.config.interval)
