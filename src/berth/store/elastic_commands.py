"""The control-command log (VMCtrl): what Berth asks of each VM's agent, and what became of it.

A command is issued → delivered (the agent fetched it) → done or failed (the agent's result),
checked against `berth.elastic.commands.COMMAND_MOVES`. Two commands change the VM's state, in
the same transaction, through `berth.store.elastic_vms.move_in`: issuing `leave` moves a joined
VM to draining (Berth stops counting it for its group at once), and a `join` done moves a
booting or draining VM to joined (its worker now serves the group).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, insert, select, update

from berth.elastic.commands import (
    COMMAND_MOVES,
    COMMAND_OPEN,
    CommandKind,
    CommandState,
    can_advance,
)
from berth.elastic.model import TERMINAL, VmState
from berth.store import schema as t
from berth.store.db import Database
from berth.store.elastic_rows import CommandRow, CommandStateError, VmStateError, command_record
from berth.store.elastic_vms import locked_vm, move_in
from berth.store.errors import NotFoundError

C = t.elastic_commands.c
RESULT_CHARS = 4000


class ElasticCommands(Database):
    """Issuing, delivering and finishing commands."""

    def issue_command(
        self,
        vm: str,
        kind: CommandKind,
        at: float,
        *,
        args: dict[str, Any] | None = None,
        by: str = "berth",
    ) -> CommandRow:
        """Issue a command to a VM's agent. An open command of the same kind is returned
        instead of a second one. `leave` moves a joined VM to draining in the same
        transaction; a VM in a terminal state takes no command (`VmStateError`)."""
        with self._write() as conn:
            row = locked_vm(conn, vm)
            if row.state in TERMINAL:
                raise VmStateError(vm, row.state.value, f"sent {kind.value}", [])
            open_same = conn.execute(
                select(t.elastic_commands).where(
                    C.vm == vm,
                    C.kind == kind.value,
                    C.state.in_([s.value for s in COMMAND_OPEN]),
                )
            ).first()
            if open_same is not None:
                return command_record(open_same)
            if kind is CommandKind.LEAVE and row.state is not VmState.DRAINING:
                move_in(conn, row, VmState.DRAINING, at, reason=f"leave issued by {by}")
            if kind is CommandKind.JOIN:  # the agent needs the group's queue to join it
                queue = conn.execute(
                    select(t.elastic_groups.c.queue).where(t.elastic_groups.c.name == row.group)
                ).scalar()
                args = {"group": row.group, "queue": dict(queue or {}), **(args or {})}
                _cancel(conn, vm, CommandKind.LEAVE, at, "superseded by join")
            if kind is CommandKind.LEAVE:
                _cancel(conn, vm, CommandKind.JOIN, at, "superseded by leave")
            new_id = conn.execute(
                insert(t.elastic_commands)
                .values(
                    vm=vm,
                    kind=kind.value,
                    args=args or {},
                    state=CommandState.ISSUED.value,
                    issued_at=at,
                    issued_by=by,
                )
                .returning(C.id)
            ).scalar_one()
            return _get(conn, int(new_id))

    def poll_commands(self, vm: str, at: float) -> list[CommandRow]:
        """The VM's open commands, oldest first, each marked delivered (the agent's fetch)."""
        with self._write() as conn:
            locked_vm(conn, vm)
            rows = [
                command_record(r)
                for r in conn.execute(
                    select(t.elastic_commands)
                    .where(C.vm == vm, C.state.in_([s.value for s in COMMAND_OPEN]))
                    .order_by(C.id)
                )
            ]
            fresh = [c.id for c in rows if c.state is CommandState.ISSUED]
            if fresh:
                conn.execute(
                    update(t.elastic_commands)
                    .where(C.id.in_(fresh))
                    .values(state=CommandState.DELIVERED.value, delivered_at=at)
                )
            return [_get(conn, c.id) for c in rows]

    def finish_command(
        self, vm: str, command_id: int, ok: bool, at: float, result: str = ""
    ) -> CommandRow:
        """The agent's result of a delivered command: done or failed. A `join` done moves the
        VM to joined. Reporting a finished command again with the same outcome is a no-op."""
        new = CommandState.DONE if ok else CommandState.FAILED
        with self._write() as conn:
            row = locked_vm(conn, vm)
            cmd = conn.execute(
                select(t.elastic_commands).where(C.id == command_id, C.vm == vm).with_for_update()
            ).first()
            if cmd is None:
                raise NotFoundError("command", f"{vm}/{command_id}")
            current = command_record(cmd)
            if current.state is new:
                return current
            if not can_advance(current.state, new):
                allowed = ", ".join(sorted(COMMAND_MOVES[current.state])) or "nothing"
                raise CommandStateError(
                    f"command {command_id} of vm {vm!r} is {current.state.value}; it cannot "
                    f"become {new.value} (from {current.state.value}: {allowed})"
                )
            if ok and current.kind is CommandKind.JOIN and row.state is not VmState.JOINED:
                move_in(conn, row, VmState.JOINED, at, reason="join done")
            conn.execute(
                update(t.elastic_commands)
                .where(C.id == command_id)
                .values(state=new.value, finished_at=at, result=result[-RESULT_CHARS:])
            )
            return _get(conn, command_id)

    def cancel_commands(self, vm: str, at: float, reason: str) -> int:
        """Fail every open command of a VM (it is gone); how many."""
        with self._write() as conn:
            return sum(_cancel(conn, vm, kind, at, reason) for kind in CommandKind)

    def list_commands(
        self,
        vm: str | None = None,
        group: str | None = None,
        states: Iterable[CommandState] | None = None,
        limit: int = 1000,
    ) -> list[CommandRow]:
        q = select(t.elastic_commands).order_by(C.id.desc()).limit(limit)
        if vm is not None:
            q = q.where(C.vm == vm)
        if group is not None:
            vms = select(t.elastic_vms.c.name).where(t.elastic_vms.c.group == group)
            q = q.where(C.vm.in_(vms))
        if states is not None:
            q = q.where(C.state.in_([s.value for s in states]))
        with self._read() as conn:
            return [command_record(r) for r in conn.execute(q)][::-1]


def _get(conn: Connection, command_id: int) -> CommandRow:
    return command_record(conn.execute(select(t.elastic_commands).where(C.id == command_id)).one())


def _cancel(conn: Connection, vm: str, kind: CommandKind, at: float, reason: str) -> int:
    res = conn.execute(
        update(t.elastic_commands)
        .where(C.vm == vm, C.kind == kind.value, C.state.in_([s.value for s in COMMAND_OPEN]))
        .values(state=CommandState.FAILED.value, finished_at=at, result=reason)
    )
    return int(res.rowcount or 0)
