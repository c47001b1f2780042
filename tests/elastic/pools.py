"""A whole elastic pool on a real batch system: Berth's service (the real app under uvicorn,
in a thread), its control loop, a simulated cloud whose boots start a real batch worker for the
VM (`WorkerLauncher`) and a real `berth agent` process holding the VM's token."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from berth.cloud.driver import Server
from berth.elastic.state import ControllerConfig
from berth.elastic.workers.launcher import WorkerLauncher
from berth.service.elastic.hooks import Hook, HookRunner
from berth.service.elastic.loop import ElasticLoop, LoopConfig, Watcher
from tests.service.elastic_env import ElasticEnv, make_elastic_env
from tests.service.servers import free_port

BERTH = str(Path(sys.executable).with_name("berth"))

CONTROL = ControllerConfig(
    keep_alive=2.0,
    hysteresis=1.0,
    boot_deadline=12.0,
    heartbeat_stale=4.0,
    drain_deadline=30.0,
    evict_deadline=30.0,
    backoff_base=2.0,
    backoff_max=10.0,
)


@dataclass
class Pool:
    env: ElasticEnv
    url: str
    worker: str  # the agent's --worker
    worker_opts: list[str]
    launcher: WorkerLauncher
    logdir: Path
    watchers: Sequence[Watcher] = ()
    hooks: Sequence[Hook] = ()
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    crash_next_boot: bool = False
    loop: ElasticLoop | None = None

    # the simulated cloud's hooks: a real worker and a real agent per booted VM
    def on_boot(self, server: Server) -> None:
        self.launcher.on_boot(server)
        cmd = [BERTH, "agent", "--vm", server.name, "--url", self.url, "--interval", "0.5"]
        cmd += ["--worker", self.worker]
        for opt in self.worker_opts:
            cmd += ["--worker-opt", opt]
        log = (self.logdir / f"agent-{server.name}.log").open("ab")
        env = {**os.environ, "BERTH_TOKEN": server.metadata["berth_token"]}
        self.agents[server.name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        if self.crash_next_boot:  # Berth dies right after the cloud accepted the boot
            self.crash_next_boot = False
            raise KeyboardInterrupt("killed mid-cycle")

    def on_delete(self, server: Server) -> None:
        self.launcher.on_delete(server)
        proc = self.agents.get(server.name)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)

    def new_loop(self) -> ElasticLoop:
        """A fresh loop over the same store and cloud: what a restarted Berth runs."""
        env = self.env
        self.loop = ElasticLoop(
            env.replica,
            {"c1": env.cloud},
            self.watchers,
            LoopConfig(
                controller=CONTROL, agent_url=self.url, shutdown_grace=15.0, drain_settle=4.0
            ),
            hooks=HookRunner(env.store, self.hooks, backoff_base=1.0, backoff_max=4.0),
            metrics=env.app.state.elastic_metrics,
        )
        return self.loop

    def drive(self, until: Callable[[], bool], timeout: float, what: str) -> float:
        """Run control cycles (0.5 s apart) until `until()`; the seconds it took (printed: `-s`
        shows where a scenario spends its time)."""
        assert self.loop is not None
        start = time.monotonic()
        while True:
            self.loop.cycle()
            if until():
                took = time.monotonic() - start
                print(f"  {what}: {took:.1f} s")
                return took
            if time.monotonic() - start > timeout:
                states = [(v.name, v.state.value) for v in self.env.store.list_vms()]
                last = self.loop.last
                groups = [] if last is None else list(last.groups)
                raise AssertionError(
                    f"not within {timeout} s: {what}; VMs {states}; last cycle {groups}; "
                    f"queue {self.loop.snapshot()}"
                )
            time.sleep(0.5)

    def kill_agent(self, vm: str) -> None:
        os.kill(self.agents[vm].pid, signal.SIGKILL)
        self.agents[vm].wait(timeout=10)

    def close(self) -> None:
        for name, proc in self.agents.items():
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=20)
            with contextlib.suppress(Exception):
                self.launcher.workers.stop(name)


@contextlib.contextmanager
def serving(env: ElasticEnv) -> Iterator[str]:
    """The app under uvicorn on a free loopback port, in a thread."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(env.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise AssertionError("the service did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def pool(
    tmp_path: Path,
    worker: str,
    worker_opts: list[str],
    launcher: WorkerLauncher,
    watchers: Sequence[Watcher],
    hooks: Sequence[Hook] = (),
) -> Iterator[Pool]:
    holder: dict[str, Any] = {}
    env = make_elastic_env(
        tmp_path / "berth.db",
        clock=time.time,
        on_boot=lambda s: holder["pool"].on_boot(s),
        on_delete=lambda s: holder["pool"].on_delete(s),
    )
    with serving(env) as url:
        p = Pool(env, url, worker, worker_opts, launcher, tmp_path, watchers, hooks)
        holder["pool"] = p
        p.new_loop()
        try:
            yield p
        finally:
            p.close()
            env.store.close()
