"""The routes of `berth agent`, the program on each elastic VM (docs/elastic.md, "agent").

Its vm token reaches only these, and only for its own VM (`deps.VmAgent`). One heartbeat a
few seconds apart carries the worker's running job count and answers with the VM's open
commands (each marked delivered); each command's result comes back on its own route.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from berth.elastic.commands import CommandKind, CommandState
from berth.service import schemas_elastic as e
from berth.service.deps import ReplicaDep, StoreDep, VmAgent
from berth.service.schemas import Ident

router = APIRouter(prefix="/v1/elastic", tags=["elastic"])


@router.post("/vms/{name}/heartbeat", response_model=e.HeartbeatOut)
def heartbeat(
    name: Ident, body: e.HeartbeatIn, _p: VmAgent, store: StoreDep, replica: ReplicaDep
) -> e.HeartbeatOut:
    """The agent's heartbeat (the service's clock stamps it) and its open commands. A VM in a
    terminal state answers 409 `vm_state`: its agent stops."""
    now = replica.clock()
    vm = store.vm_heartbeat(name, now, body.running_jobs)
    commands = store.poll_commands(name, now)
    return e.HeartbeatOut(
        vm=vm.name,
        group=vm.group,
        state=vm.state.value,
        commands=[e.CommandOut.of(c) for c in commands],
    )


@router.post("/vms/{name}/commands/{command_id}/result", response_model=e.CommandOut)
def command_result(
    name: Ident,
    command_id: int,
    body: e.ResultIn,
    _p: VmAgent,
    store: StoreDep,
    replica: ReplicaDep,
    request: Request,
) -> e.CommandOut:
    """A delivered command's outcome: done or failed (409 `command_state` otherwise). A
    `join` done moves the VM to joined."""
    before = store.get_vm(name)
    cmd = store.finish_command(name, command_id, body.ok, replica.clock(), body.result)
    metrics = getattr(request.app.state, "elastic_metrics", None)
    joined = cmd.kind is CommandKind.JOIN and cmd.state is CommandState.DONE
    if metrics is not None and joined and before.state.value == "booting":
        metrics.boot.observe(max(0.0, (cmd.finished_at or 0.0) - before.requested_at))
    return e.CommandOut.of(cmd)
