"""Defrag steps as real live migrations (docs/defrag.md, docs/openstack.md).

The defrag driver (`berth.service.defrag`) starts a step by claiming its target in Berth's store
(`start_step`: the step is `migrating`, the instance held on both hosts). For a cluster Berth
drives, this module then asks the cloud to move the server there (`CloudDriver.live_migrate`),
having first recorded that it did (the server's record goes `migrating`, so a restart does not
ask twice). The step is confirmed (`DefragService.confirm`: the source released, the instance
row on the target) when the cloud reports the server ACTIVE on the target; it is aborted (the
target claim released) when the cloud refuses, the server goes to ERROR, comes back ACTIVE on
the source after the cloud reported it moving, or nothing is heard for `timeout` seconds; an
aborted step gets a new target on the current table (`DefragService._replan`) and starts again,
at most `MAX_REPLANS` times.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from berth.cloud.driver import CloudDriver, CloudError, Server, ServerState
from berth.service.defrag import MAX_REPLANS, DefragService
from berth.store.defrag import PlanStateError, StepRow, StepStateError
from berth.store.errors import NotFoundError
from berth.store.repo import ServerRecord

log = logging.getLogger("berth.service.clouds")

TIMEOUT = 600.0
"""Seconds a live migration may take before its step is aborted."""


class DefragExecutor:
    """Carries out the `migrating` defrag steps of the clusters Berth drives."""

    def __init__(self, defrag: DefragService, timeout: float = TIMEOUT) -> None:
        self.defrag = defrag
        self.store = defrag.replica.store
        self.timeout = timeout
        self._moving: set[str] = set()  # instances the cloud reported MIGRATING
        self._lock = threading.Lock()

    def steps(self, cluster: str) -> dict[str, StepRow]:
        """The cluster's steps in flight, by instance id."""
        out = {}
        plans: dict[str, str] = {}
        for s in self.defrag.store.migrating_steps():
            if s.plan_id not in plans:
                plans[s.plan_id] = self.defrag.store.get_plan(s.plan_id).cluster
            if plans[s.plan_id] == cluster:
                out[s.instance_id] = s
        return out

    def tick(self, cluster: str, driver: CloudDriver) -> int:
        """Ask the cloud for the migrations not asked yet; abort the ones that took too long.
        The number of steps acted on."""
        acted = 0
        for iid, s in self.steps(cluster).items():
            record = self.store.find_server(iid)
            if record is None or record.server_id is None:
                self._fail(s, "Berth has no server for this instance")
                acted += 1
            elif record.state != "migrating" or record.fault != _marker(s):
                self._migrate(driver, s, record)
                acted += 1
            elif time.time() - record.updated_at > self.timeout:
                self._fail(s, f"no word from the cloud in {self.timeout:g} s")
                acted += 1
        return acted

    def _migrate(self, driver: CloudDriver, s: StepRow, record: ServerRecord) -> None:
        assert record.server_id is not None
        # recorded first: a restart finds the migration asked for, not a step to start again
        self.store.set_server(s.instance_id, state="migrating", fault=_marker(s))
        try:
            driver.live_migrate(record.server_id, s.target)
        except CloudError as exc:
            self.store.set_server(s.instance_id, state="active", fault=None)
            self._fail(s, f"live migration to {s.target}: {exc}")

    def observe(self, server: Server, instance_id: str, record: ServerRecord | None) -> bool:
        """A server changed: confirm or abort its step if it is being moved; True if it is."""
        s = self._step_of(instance_id)
        if s is None:
            return False
        if server.state is ServerState.MIGRATING:
            with self._lock:
                self._moving.add(instance_id)
            return True
        if server.host == s.target and server.state is ServerState.ACTIVE:
            with contextlib.suppress(StepStateError, PlanStateError):
                self.defrag.confirm(s.plan_id, s.step)
            self.store.set_server(instance_id, state="active", host=s.target)
            with self._lock:
                self._moving.discard(instance_id)
            return True
        with self._lock:
            came_back = instance_id in self._moving and server.host == s.source
        if server.state is ServerState.ERROR or (came_back and server.state is ServerState.ACTIVE):
            self.store.set_server(instance_id, state=server.state.value, host=server.host)
            self._fail(s, f"live migration to {s.target} failed ({server.fault or server.state})")
            return True
        return record is not None and record.state == "migrating"

    def _step_of(self, instance_id: str) -> StepRow | None:
        for s in self.defrag.store.migrating_steps():
            if s.instance_id == instance_id:
                return s
        return None

    def _fail(self, s: StepRow, reason: str) -> None:
        """Abort the step (its target claim released), then give it a new target."""
        with self._lock:
            self._moving.discard(s.instance_id)
        try:
            self.defrag.abort(s.plan_id, s.step, reason)
        except (StepStateError, PlanStateError):
            return
        if s.replans >= MAX_REPLANS:
            return
        plan = self.defrag.store.get_plan(s.plan_id)
        aborted = next(x for x in self.defrag.store.steps(s.plan_id) if x.step == s.step)
        new = self.defrag._replan(plan, aborted)
        if new is None:
            return
        with contextlib.suppress(StepStateError, PlanStateError, NotFoundError):
            self.defrag.store.reopen_step(s.plan_id, s.step, *new, reason=reason)
            self.defrag.migrations.labels("replanned").inc()
            self.defrag.wake.set()
        log.info("defrag %s step %d: %s; re-planned", s.plan_id, s.step, reason)


def _marker(s: StepRow) -> str:
    return f"migrating to {s.target} (plan {s.plan_id} step {s.step})"
