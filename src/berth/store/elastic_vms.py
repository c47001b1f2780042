"""Elastic VMs: one record per VM, the one place its state changes (`move_in`), its history,
heartbeats and its agent token.

Every move is checked against `berth.elastic.model.can_move` with the VM's row locked, and
written together with its history entry; an illegal move raises `VmStateError` and writes
nothing. A VM that reaches a terminal state loses its agent token and its open commands fail,
in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from berth.elastic.model import TERMINAL, TRANSITIONS, VmState, can_move
from berth.store import schema as t
from berth.store.db import Database
from berth.store.elastic_rows import StateChange, VmRow, VmStateError, change_record, vm_record
from berth.store.errors import AlreadyExistsError, InvalidReferenceError, NotFoundError
from berth.store.tokens import insert_token

V = t.elastic_vms.c


def locked_vm(conn: Connection, name: str) -> VmRow:
    row = conn.execute(select(t.elastic_vms).where(V.name == name).with_for_update()).first()
    if row is None:
        raise NotFoundError("vm", name)
    return vm_record(row)


def move_in(
    conn: Connection, vm: VmRow, new: VmState, at: float, reason: str | None = None
) -> VmRow:
    """Move `vm` (read with its row locked) to `new` in the caller's transaction: checked
    against the state machine, logged in the history; a terminal state revokes its token."""
    if not can_move(vm.state, new):
        raise VmStateError(vm.name, vm.state.value, new.value, sorted(TRANSITIONS[vm.state]))
    values: dict[str, Any] = {"state": new.value, "since": at}
    if reason is not None:
        values["reason"] = reason
    conn.execute(update(t.elastic_vms).where(V.name == vm.name).values(**values))
    conn.execute(
        insert(t.elastic_vm_states).values(
            vm=vm.name, group=vm.group, state=new.value, at=at, cores=vm.cores, reason=reason
        )
    )
    if new in TERMINAL:  # its agent may touch nothing any more; its open commands are moot
        if vm.token_id is not None:
            conn.execute(update(t.tokens).where(t.tokens.c.id == vm.token_id).values(revoked=True))
        c = t.elastic_commands.c
        conn.execute(
            update(t.elastic_commands)
            .where(c.vm == vm.name, c.state.in_(["issued", "delivered"]))
            .values(state="failed", finished_at=at, result=f"vm became {new.value}")
        )
    return vm_record(conn.execute(select(t.elastic_vms).where(V.name == vm.name)).one())


class ElasticVms(Database):
    """VM records, their moves, heartbeats and history."""

    def record_vm(self, name: str, group: str, at: float, *, attempt: int = 1) -> tuple[VmRow, str]:
        """Record a VM Berth decided to start (state requested) with its agent token, before
        any cloud call; returns the row and the token's secret (shown once)."""
        with self._write() as conn:
            g = conn.execute(
                select(t.elastic_groups.c.cores_per_vm).where(t.elastic_groups.c.name == group)
            ).first()
            if g is None:
                raise InvalidReferenceError("group", f"no elastic group {group!r}")
            if conn.execute(select(V.name).where(V.name == name)).first() is not None:
                raise AlreadyExistsError("vm", name)
            token, secret = insert_token(conn, f"vm:{name}", "vm", vm=name)
            try:
                conn.execute(
                    insert(t.elastic_vms).values(
                        name=name,
                        group=group,
                        state=VmState.REQUESTED.value,
                        since=at,
                        requested_at=at,
                        attempt=attempt,
                        cores=int(g.cores_per_vm),
                        token_id=token.id,
                    )
                )
            except IntegrityError:
                raise AlreadyExistsError("vm", name) from None
            conn.execute(
                insert(t.elastic_vm_states).values(
                    vm=name, group=group, state="requested", at=at, cores=int(g.cores_per_vm)
                )
            )
            return vm_record(
                conn.execute(select(t.elastic_vms).where(V.name == name)).one()
            ), secret

    def renew_vm_token(self, name: str) -> str:
        """A new agent token for a VM not yet booted (the old secret was lost with a restart);
        the old token is revoked."""
        with self._write() as conn:
            vm = locked_vm(conn, name)
            if vm.state is not VmState.REQUESTED:
                raise VmStateError(name, vm.state.value, "re-tokened", ["requested only"])
            if vm.token_id is not None:
                conn.execute(
                    update(t.tokens).where(t.tokens.c.id == vm.token_id).values(revoked=True)
                )
            token, secret = insert_token(conn, f"vm:{name}", "vm", vm=name)
            conn.execute(update(t.elastic_vms).where(V.name == name).values(token_id=token.id))
            return secret

    def place_vm(
        self,
        name: str,
        *,
        cluster: str | None = None,
        host: str | None = None,
        instance_id: str | None = None,
        server_id: str | None = None,
    ) -> VmRow:
        """Note where a VM was placed and booted (only the fields given change)."""
        given = {"cluster": cluster, "host": host, "instance_id": instance_id}
        given["server_id"] = server_id
        values = {k: v for k, v in given.items() if v is not None}
        with self._write() as conn:
            vm = locked_vm(conn, name)
            if vm.state in TERMINAL:
                raise VmStateError(name, vm.state.value, "placed", [])
            conn.execute(update(t.elastic_vms).where(V.name == name).values(**values))
            return vm_record(conn.execute(select(t.elastic_vms).where(V.name == name)).one())

    def move_vm(
        self,
        name: str,
        new: VmState,
        at: float,
        reason: str | None = None,
        *,
        expect: VmState | None = None,
    ) -> VmRow:
        """Move a VM to `new` (`VmStateError` if the state machine forbids it, or if it is not
        in `expect` when given); nothing changes on an error."""
        with self._write() as conn:
            vm = locked_vm(conn, name)
            if expect is not None and vm.state is not expect:
                raise VmStateError(name, vm.state.value, new.value, [f"only from {expect.value}"])
            return move_in(conn, vm, new, at, reason)

    def get_vm(self, name: str) -> VmRow:
        with self._read() as conn:
            row = conn.execute(select(t.elastic_vms).where(V.name == name)).first()
        if row is None:
            raise NotFoundError("vm", name)
        return vm_record(row)

    def list_vms(
        self, group: str | None = None, states: Iterable[VmState] | None = None
    ) -> list[VmRow]:
        q = select(t.elastic_vms).order_by(V.requested_at, V.name)
        if group is not None:
            q = q.where(V.group == group)
        if states is not None:
            q = q.where(V.state.in_([s.value for s in states]))
        with self._read() as conn:
            return [vm_record(r) for r in conn.execute(q)]

    def vm_heartbeat(self, name: str, at: float, running_jobs: int) -> VmRow:
        """The agent's heartbeat: its time and running job count; `idle_since` is set when the
        worker runs nothing and cleared when it runs something. A VM in a terminal state is
        refused (`VmStateError`): its agent should stop."""
        if running_jobs < 0:
            raise InvalidReferenceError("running_jobs", f"must be >= 0, not {running_jobs}")
        with self._write() as conn:
            vm = locked_vm(conn, name)
            if vm.state in TERMINAL:
                raise VmStateError(name, vm.state.value, "heartbeating", [])
            idle = None if running_jobs else (vm.idle_since if vm.idle_since is not None else at)
            beat = at if vm.heartbeat is None else max(vm.heartbeat, at)
            conn.execute(
                update(t.elastic_vms)
                .where(V.name == name)
                .values(heartbeat=beat, running_jobs=running_jobs, idle_since=idle)
            )
            return vm_record(conn.execute(select(t.elastic_vms).where(V.name == name)).one())

    def vm_history(
        self,
        since: float | None = None,
        until: float | None = None,
        group: str | None = None,
        vm: str | None = None,
    ) -> list[StateChange]:
        """State changes in time order (`since` <= at < `until`), for accounting."""
        s = t.elastic_vm_states.c
        q = select(t.elastic_vm_states).order_by(s.at, s.id)
        if since is not None:
            q = q.where(s.at >= since)
        if until is not None:
            q = q.where(s.at < until)
        if group is not None:
            q = q.where(s.group == group)
        if vm is not None:
            q = q.where(s.vm == vm)
        with self._read() as conn:
            return [change_record(r) for r in conn.execute(q)]
