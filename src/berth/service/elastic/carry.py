"""Carrying the controller's actions out, each recorded before the outside world is touched.

* start: the VM is recorded (requested, with its agent token) before anything else; it is
  placed through Berth's own placement as business type `elastic` (preemptible by on-demand
  requests), its claim noted on the record, then booted through the cluster's `CloudDriver`
  on exactly that host and marked booting. The VM's name is the cloud server's name, so a
  restart finds a boot that happened (`reconcile`) instead of booting a twin.
* drain: a `leave` command (the record moves to draining with it).
* retire: once the worker confirmed its `leave` at least `drain_settle` seconds ago (so a job
  matched just before shows as running), a `shutdown` command, so the agent stops its batch
  daemon and takes it out of the batch system; once that is done (or `shutdown_grace` passed),
  the record is retired, then the leave hooks run, the server is deleted and the claim
  released. A forced retire (drain deadline) does not wait for the leave.
* reap: the record becomes failed (never joined) or lost (stale heartbeat) — only from the
  state the controller saw —, then the leave hooks run for a VM that had joined, the server is
  deleted and the claim released.

Ending a VM moves its record first: a restart halfway finds a finished record whose server or
claim is still there, and `reconcile` removes them.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from berth.cloud.driver import BootRequest, CloudDriver, CloudError, CloudErrorKind
from berth.elastic.actions import Reap, Retire, Start
from berth.elastic.commands import CommandKind, CommandState
from berth.elastic.model import VmState
from berth.service.elastic.hooks import HookRunner
from berth.service.placing.errors import ContentionError, NoPlacementError
from berth.service.placing.plain import PlaceArgs, place
from berth.service.replica import Replica
from berth.store.elastic_rows import CommandRow, ElasticGroupRow, VmRow, VmStateError
from berth.store.errors import AlreadyExistsError, NotFoundError

log = logging.getLogger("berth.elastic")
BUSINESS = "elastic"


@dataclass(frozen=True)
class Outside:
    """What the loop acts on: the service's replica (store and placement), the clusters'
    drivers, the hooks, and where agents reach the service."""

    replica: Replica
    drivers: Mapping[str, CloudDriver]
    hooks: HookRunner
    agent_url: str
    project: str
    clock: Callable[[], float]
    shutdown_grace: float = 30.0
    drain_settle: float = 10.0


def new_name(group: str) -> str:
    return f"{group}-{secrets.token_hex(4)}"


def start_one(out: Outside, group: ElasticGroupRow, clusters: tuple[str, ...]) -> VmRow | None:
    """Record, place and boot one VM of `group`; the record (possibly failed) or None when
    no record could be made."""
    store = out.replica.store
    now = out.clock()
    for _ in range(5):
        try:
            vm, secret = store.record_vm(new_name(group.name), group.name, now)
            break
        except AlreadyExistsError:
            continue
    else:
        return None
    return place_and_boot(out, vm, secret, group, clusters)


def place_and_boot(
    out: Outside, vm: VmRow, secret: str, group: ElasticGroupRow, clusters: tuple[str, ...]
) -> VmRow:
    """Place a requested VM (unless it holds a claim already) and boot it."""
    store = out.replica.store
    if vm.instance_id is None or vm.host is None or vm.cluster is None:
        placed = _place(out, vm, group, clusters)
        if placed is None:
            return store.move_vm(vm.name, VmState.FAILED, out.clock(), "no placement")
        vm = placed
    assert vm.cluster is not None
    assert vm.host is not None
    driver = out.drivers[vm.cluster]
    request = BootRequest(
        name=vm.name,
        flavor=group.spec.flavor,
        host=vm.host,
        project=out.project,
        image=group.spec.image,
        metadata={
            "berth_vm": vm.name,
            "berth_group": vm.group,
            "berth_cores": str(vm.cores),
            "berth_url": out.agent_url,
            "berth_token": secret,
        },
    )
    try:
        server = driver.boot(request)
    except CloudError as exc:
        if exc.kind is CloudErrorKind.UNREACHABLE:  # outcome unknown: reconcile decides
            log.warning("boot of %s: %s; left requested for reconciliation", vm.name, exc)
            return vm
        release_claim(out, vm)
        return store.move_vm(vm.name, VmState.FAILED, out.clock(), f"boot refused: {exc}")
    store.place_vm(vm.name, server_id=server.id)
    return store.move_vm(vm.name, VmState.BOOTING, out.clock(), expect=VmState.REQUESTED)


def _place(
    out: Outside, vm: VmRow, group: ElasticGroupRow, clusters: tuple[str, ...]
) -> VmRow | None:
    order = [c for c in clusters if c in out.drivers]
    if group.cluster is not None:
        order = [c for c in order if c == group.cluster]
    for cluster in order:
        args = PlaceArgs(
            flavor=group.spec.flavor,
            count=1,
            project=out.project,
            cluster=cluster,
            business_type=BUSINESS,
        )
        try:
            placed = place(out.replica, args)
        except (NoPlacementError, ContentionError) as exc:
            log.info("no placement for %s in %s: %s", vm.name, cluster, exc)
            continue
        sel = placed.decision.selections[0]
        return out.replica.store.place_vm(
            vm.name, cluster=placed.cluster, host=sel.host, instance_id=sel.instance_id
        )
    return None


def release_claim(out: Outside, vm: VmRow) -> None:
    if vm.instance_id is None:
        return
    with contextlib.suppress(NotFoundError):  # evicted by an on-demand request, or released
        out.replica.release(vm.instance_id, project=out.project)


def delete_server(out: Outside, vm: VmRow) -> None:
    if vm.server_id is None or vm.cluster is None or vm.cluster not in out.drivers:
        return
    try:
        out.drivers[vm.cluster].delete(vm.server_id)
    except CloudError as exc:
        if exc.kind is not CloudErrorKind.NOT_FOUND:
            raise


def reap(out: Outside, action: Reap, vm: VmRow) -> VmRow | None:
    """The record moves first, and only from the state the controller saw (its agent may have
    joined meanwhile: then nothing is done); the server and the claim go after. A restart in
    between finds a finished record with a server, which `reconcile` deletes."""
    try:
        gone = out.replica.store.move_vm(
            vm.name, action.outcome, out.clock(), action.reason.message, expect=vm.state
        )
    except VmStateError as exc:
        log.info("reap of %s skipped: %s", vm.name, exc)
        return None
    if vm.state in (VmState.JOINED, VmState.DRAINING):
        out.hooks.run("leave", gone)
    delete_server(out, gone)
    release_claim(out, gone)
    return gone


def retire(out: Outside, action: Retire, vm: VmRow) -> VmRow | None:
    """Ask the agent to shut its worker down; delete once it did (or the grace passed)."""
    store = out.replica.store
    now = out.clock()
    log_ = store.list_commands(vm=vm.name)
    asked = [c for c in log_ if c.kind is CommandKind.SHUTDOWN]
    if asked:
        cmd = asked[-1]
    elif not action.force and not _settled(out, log_, now):
        return None
    else:
        cmd = store.issue_command(vm.name, CommandKind.SHUTDOWN, now, by="elastic-loop")
    finished = cmd.state is CommandState.DONE or cmd.state is CommandState.FAILED
    if not finished and now - cmd.issued_at < out.shutdown_grace:
        return None
    try:
        gone = store.move_vm(
            vm.name, VmState.RETIRED, out.clock(), action.reason.message, expect=VmState.DRAINING
        )
    except VmStateError as exc:
        log.info("retire of %s skipped: %s", vm.name, exc)
        return None
    out.hooks.run("leave", gone)
    delete_server(out, gone)
    release_claim(out, gone)
    return gone


def _settled(out: Outside, log_: list[CommandRow], now: float) -> bool:
    """The worker confirmed it left (its `leave` is done) `drain_settle` seconds ago: a job
    the batch system matched just before the leave has had time to show as running (a batch
    system reports a new claim only at its next update), so "no running job" can be trusted."""
    leaves = [c for c in log_ if c.kind is CommandKind.LEAVE and c.state is CommandState.DONE]
    if not leaves:
        return False
    done = leaves[-1].finished_at
    return done is not None and now - done >= out.drain_settle


def start(out: Outside, action: Start, group: ElasticGroupRow) -> list[VmRow]:
    made = []
    for _ in range(action.count):
        vm = start_one(out, group, action.clusters)
        if vm is not None:
            made.append(vm)
    return made
