"""Join/leave hook runs (each run with its outcome, output tail and next retry) and the power
state of hosts (tidal management)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select

from berth.store import schema as t
from berth.store.db import Database
from berth.store.elastic_rows import HookRun, HostPowerRow, hook_record
from berth.store.errors import InvalidReferenceError

H = t.elastic_hook_runs.c
OUTPUT_CHARS = 4000
POWER = ("on", "off")


class ElasticHooks(Database):
    """Hook runs and host power."""

    def record_hook_run(self, run: HookRun) -> HookRun:
        if run.outcome not in ("ok", "failed"):
            raise InvalidReferenceError("outcome", f"must be ok or failed, not {run.outcome!r}")
        with self._write() as conn:
            new_id = conn.execute(
                insert(t.elastic_hook_runs)
                .values(
                    vm=run.vm,
                    event=run.event,
                    hook=run.hook,
                    attempt=run.attempt,
                    outcome=run.outcome,
                    exit_code=run.exit_code,
                    output=run.output[-OUTPUT_CHARS:],
                    started_at=run.started_at,
                    finished_at=run.finished_at,
                    next_retry=run.next_retry,
                )
                .returning(H.id)
            ).scalar_one()
            return hook_record(
                conn.execute(select(t.elastic_hook_runs).where(H.id == new_id)).one()
            )

    def hook_runs(
        self, vm: str | None = None, event: str | None = None, limit: int = 1000
    ) -> list[HookRun]:
        """Runs in the order they finished (the latest `limit`)."""
        q = select(t.elastic_hook_runs).order_by(H.id.desc()).limit(limit)
        if vm is not None:
            q = q.where(H.vm == vm)
        if event is not None:
            q = q.where(H.event == event)
        with self._read() as conn:
            return [hook_record(r) for r in conn.execute(q)][::-1]

    def set_host_power(
        self, host: str, power: str, at: float, *, reason: str = "", by: str = "berth"
    ) -> HostPowerRow:
        if power not in POWER:
            raise InvalidReferenceError("power", f"must be on or off, not {power!r}")
        with self._write() as conn:
            if not conn.execute(select(t.hosts.c.name).where(t.hosts.c.name == host)).first():
                raise InvalidReferenceError("host", f"no host {host!r}")
            conn.execute(delete(t.host_power).where(t.host_power.c.host == host))
            conn.execute(
                insert(t.host_power).values(
                    host=host, power=power, since=at, reason=reason, changed_by=by
                )
            )
        return HostPowerRow(host, power, at, reason, by)

    def host_power_states(self) -> list[HostPowerRow]:
        """Hosts whose power Berth changed (a host absent here is on)."""
        with self._read() as conn:
            rows = conn.execute(select(t.host_power).order_by(t.host_power.c.host))
            return [HostPowerRow(r.host, r.power, r.since, r.reason, r.changed_by) for r in rows]
