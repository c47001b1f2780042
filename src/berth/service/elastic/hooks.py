"""Join and leave hooks (C5): pluggable programs run when a VM joins its group's pool and when
it leaves it (DNS, configuration management, monitoring registration).

A hook is an executable (argv; the VM is described in `BERTH_*` environment variables) or a
Python callable named by import path (`pkg.module:function`, called with the event and the
VM's fields; an exception is a failure). Every run is recorded in the store with its outcome,
exit code, output tail and attempt number. A failed run gets a `next_retry` time
(`backoff_base` × 2^(attempt-1), capped at `backoff_max`); until every join hook of a VM has
succeeded, the VM is held out of the pool (no join command is issued) and the hooks run again
once their retry time has come.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.store.elastic_rows import HookRun, VmRow
from berth.store.repo import Store

EVENTS = ("join", "leave")
TAIL = 4000


@dataclass(frozen=True)
class Hook:
    """One hook: `command` is an argv, or `["python:pkg.module:function"]`."""

    name: str
    command: tuple[str, ...]
    events: frozenset[str] = field(default_factory=lambda: frozenset(EVENTS))
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError(f"hooks[{self.name}].command: must not be empty")
        bad = sorted(self.events - set(EVENTS))
        if bad:
            raise ValueError(f"hooks[{self.name}].events: unknown event {bad[0]!r}")


def vm_env(event: str, vm: VmRow) -> dict[str, str]:
    """What a hook is told about the VM (`BERTH_*`)."""
    fields = {
        "BERTH_EVENT": event,
        "BERTH_VM": vm.name,
        "BERTH_GROUP": vm.group,
        "BERTH_CLUSTER": vm.cluster or "",
        "BERTH_HOST": vm.host or "",
        "BERTH_SERVER_ID": vm.server_id or "",
        "BERTH_STATE": vm.state.value,
    }
    return fields


class HookRunner:
    """Runs the configured hooks for a VM's event and logs every run in the store."""

    def __init__(
        self,
        store: Store,
        hooks: Sequence[Hook] = (),
        *,
        backoff_base: float = 5.0,
        backoff_max: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.hooks = tuple(hooks)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.clock = clock

    def for_event(self, event: str) -> list[Hook]:
        return [h for h in self.hooks if event in h.events]

    def _latest(self, vm: str, event: str) -> dict[str, HookRun]:
        latest: dict[str, HookRun] = {}
        for run in self.store.hook_runs(vm=vm, event=event):
            latest[run.hook] = run
        return latest

    def run(self, event: str, vm: VmRow) -> bool:
        """Run the hooks of `event` not yet done for `vm` whose retry time has come; True when
        every hook of the event has now succeeded."""
        latest = self._latest(vm.name, event)
        ok = True
        for hook in self.for_event(event):
            prev = latest.get(hook.name)
            if _outcome(prev) == "ok":
                continue
            if prev is not None and prev.next_retry is not None and prev.next_retry > self.clock():
                ok = False
                continue
            attempt = 1 if prev is None else prev.attempt + 1
            ok = self._run_one(hook, event, vm, attempt) and ok
        return ok

    def _run_one(self, hook: Hook, event: str, vm: VmRow, attempt: int) -> bool:
        started = self.clock()
        code, output = _execute(hook, event, vm)
        finished = self.clock()
        good = code == 0
        delay = min(self.backoff_base * 2.0 ** min(attempt - 1, 30), self.backoff_max)
        self.store.record_hook_run(
            HookRun(
                vm=vm.name,
                event=event,
                hook=hook.name,
                attempt=attempt,
                outcome="ok" if good else "failed",
                started_at=started,
                finished_at=finished,
                exit_code=code,
                output=output[-TAIL:],
                next_retry=None if good else finished + delay,
            )
        )
        return good


def _outcome(run: HookRun | None) -> str | None:
    return None if run is None else run.outcome


def _execute(hook: Hook, event: str, vm: VmRow) -> tuple[int | None, str]:
    """(exit code, output); a Python hook exits 0 unless it raises."""
    env = vm_env(event, vm)
    first = hook.command[0]
    if first.startswith("python:"):
        try:
            fn = _callable(first.removeprefix("python:"))
            result = fn(event, dict(env))
            return 0, "" if result is None else str(result)
        except Exception:
            return 1, traceback.format_exc()
    try:
        done = subprocess.run(
            list(hook.command),
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=hook.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return None, f"{out}\ntimed out after {hook.timeout:g} s"
    except OSError as exc:
        return None, f"cannot run {first!r}: {exc}"
    return done.returncode, done.stdout + done.stderr


def _callable(path: str) -> Callable[[str, Mapping[str, str]], Any]:
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{path!r}: a Python hook is 'python:package.module:function'")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise TypeError(f"{path!r} is not callable")
    return fn
