"""A Slurm slurmd standing for one VM: started, joined, drained and stopped by Berth.

Two ways to become a node, one per `mode`:
- "dynamic" (a real VM, one slurmd per machine): `slurmd -Z -N <vm> --conf "CPUs=N"`, a node
  named after the VM; `stop` deletes it (`scontrol delete`).
- "slot" (many "VMs" on one machine, as in the tests): Slurm 22.05 reaches a dynamic node on
  the cluster-wide SlurmdPort only, so the worker takes a free FUTURE node with its own port
  from the ones scripts/ensure-slurm.sh declares (`berth-c<cpus>-<k>`), starts `slurmd -N` for
  it and writes the VM's name in the node's comment; `stop` returns it to FUTURE.
Joining puts the node in the group's partition (and nowhere else) with the group as its
feature; leaving drains it (`state=drain`): running jobs end, no new one starts.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from berth.elastic.model import BatchSystem, QueueSelector
from berth.elastic.procs import BatchCommandError, read_pid, run, stop_pid

SLOT = re.compile(r"^NodeName=(berth-c(\d+)-\d+)\s.*State=FUTURE", re.MULTILINE)


class SlurmWorkers:
    """`BatchWorker` for Slurm over the cluster whose slurm.conf is `conf`."""

    system = BatchSystem.SLURM

    def __init__(self, conf: str | os.PathLike[str], *, mode: str = "slot") -> None:
        if mode not in ("slot", "dynamic"):
            raise ValueError(f"mode: 'slot' or 'dynamic', got {mode!r}")
        self.conf = Path(conf)
        self.mode = mode
        self.home = self.conf.parent.parent  # the state dir scripts/ensure-slurm.sh made
        self.state = self.home / "workers"
        self.env = {"SLURM_CONF": str(self.conf)}

    # ---- bookkeeping: which node stands for which VM --------------------------------------
    def _record(self, vm: str) -> Path:
        if not vm or "/" in vm or vm.startswith(".") or "," in vm:
            raise ValueError(f"vm: {vm!r} is not a usable VM name")
        return self.state / "vms" / vm

    def node(self, vm: str) -> str:
        """The Slurm node name standing for `vm` (raises if it has none)."""
        try:
            return self._record(vm).read_text().strip()
        except FileNotFoundError:
            raise BatchCommandError(f"{vm}: no Slurm worker was started for it") from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _take_slot(self, vm: str, cpus: int) -> str:
        taken = self.state / "slots"
        taken.mkdir(parents=True, exist_ok=True)
        for name, slot_cpus in SLOT.findall(self.conf.read_text()):
            if int(slot_cpus) != cpus:
                continue
            try:
                fd = os.open(taken / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, vm.encode())
            os.close(fd)
            return str(name)
        raise BatchCommandError(f"{vm}: no free Slurm worker slot with {cpus} CPUs")

    # ---- BatchWorker ---------------------------------------------------------------------
    def start(self, vm: str, cpus: int) -> None:
        if cpus < 1:
            raise ValueError(f"cpus: must be at least 1, got {cpus}")
        record = self._record(vm)
        if record.exists() and read_pid(self._pidfile(self.node(vm))):
            return
        record.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            node = vm if self.mode == "dynamic" else self._take_slot(vm, cpus)
            record.write_text(node)
        if self.mode == "dynamic":
            cmd = ["slurmd", "-Z", "-N", vm, "--conf", f"CPUs={cpus}"]
        else:
            cmd = ["slurmd", "-N", node]
        run(cmd, env=self.env)  # slurmd forks; its pid file names the daemon
        if self.mode == "slot":
            self._scontrol("update", f"nodename={node}", f"comment={vm}")

    def join(self, vm: str, queue: QueueSelector) -> None:
        if not queue.partition:
            raise ValueError("queue.partition: required to join a Slurm queue")
        node = self.node(vm)
        self._scontrol(
            "update", f"nodename={node}", f"availablefeatures={queue.partition}",
            f"activefeatures={queue.partition}",
        )  # fmt: skip
        self._set_partition(node, queue.partition)
        state = self._node_state(node)
        if "DRAIN" in state:
            self._scontrol("update", f"nodename={node}", "state=resume")

    def leave(self, vm: str) -> None:
        self._scontrol("update", f"nodename={self.node(vm)}", "state=drain", "reason=berth:G_none")

    def running_jobs(self, vm: str) -> int:
        out = run(
            [
                "squeue",
                "-h",
                "-w",
                self.node(vm),
                "-t",
                "RUNNING,COMPLETING,CONFIGURING",
                "-o",
                "%i",
            ],
            env=self.env,
        )
        return len(out.split())

    def stop(self, vm: str) -> None:
        record = self._record(vm)
        if not record.exists():
            return
        node = self.node(vm)
        self._set_partition(node, None)
        pid = read_pid(self._pidfile(node))
        if pid is not None:
            stop_pid(pid, grace=15.0)
        if self.mode == "dynamic":
            self._scontrol("delete", f"nodename={node}")
        else:
            self._scontrol("update", f"nodename={node}", "comment=", "state=future")
            (self.state / "slots" / node).unlink(missing_ok=True)
        record.unlink()

    def workers(self) -> list[str]:
        vms = self.state / "vms"
        if not vms.is_dir():
            return []
        return sorted(p.name for p in vms.iterdir() if read_pid(self._pidfile(p.read_text())))

    # ---- Slurm commands ------------------------------------------------------------------
    def _pidfile(self, node: str) -> Path:
        return self.home / "run" / f"slurmd-{node.strip()}.pid"

    def _scontrol(self, *args: str) -> str:
        return run(["scontrol", *args], env=self.env)

    def _node_state(self, node: str) -> str:
        match = re.search(r"\bState=(\S+)", self._scontrol("show", "node", node))
        return match.group(1) if match else ""

    def _set_partition(self, node: str, partition: str | None) -> None:
        """Make `partition` the only one `node` is in (None: none); one writer at a time."""
        with self._locked():
            for line in self._scontrol("show", "partition", "-o").splitlines():
                name = re.search(r"PartitionName=(\S+)", line)
                listed = re.search(r"\bNodes=(\S+)", line)
                if not name:
                    continue
                nodes = self._expand(listed.group(1) if listed else "")
                want = [n for n in nodes if n != node]
                if name.group(1) == partition:
                    want.append(node)
                if want != nodes:
                    self._scontrol("update", f"partitionname={name.group(1)}",
                                   f"nodes={','.join(want)}")  # fmt: skip

    def _expand(self, hostlist: str) -> list[str]:
        if hostlist in ("", "(null)"):
            return []
        return run(["scontrol", "show", "hostnames", hostlist], env=self.env).split()
