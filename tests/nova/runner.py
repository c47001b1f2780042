"""The warm Nova runner (scripts/nova/runner.py) as seen from the tests, and the fleet -> Nova
JSON translation: Nova's view of a Berth fleet, computed from the fleet's own hosts, flavors and
instances (not from Berth's table), so that the two sides share only the fleet."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from berth.core.model import Fleet

ROOT = Path(__file__).resolve().parents[2]


class NovaRunner:
    """One long-lived runner process; `run` sends many cases in one line and reads one line."""

    def __init__(self) -> None:
        python = subprocess.run(
            [str(ROOT / "scripts" / "ensure-nova-venv.sh")],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout.strip()
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [python, str(ROOT / "scripts" / "nova" / "runner.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        hello = json.loads(self._line())
        self.version = hello["nova"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Nova runner exited ({self.proc.wait()})")
        return line

    def run(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cases": cases}) + "\n")
        self.proc.stdin.flush()
        results: list[dict[str, Any]] = json.loads(self._line())["results"]
        return results

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def nova_hosts(fleet: Fleet, cells: dict[str, list[tuple[int, int, int]]]) -> list[dict[str, Any]]:
    """Each host as Nova sees it: its inventory and its instances (`cells`: instance id ->
    (host cell, vCPUs, MB) of a NUMA guest, as placed)."""
    flavors = {f.name: f for f in fleet.flavors}
    meta = {a.name: dict(a.metadata) for a in fleet.aggregates}
    out = []
    for h in fleet.hosts:
        insts = []
        for inst in fleet.instances:
            if inst.host != h.name:
                continue
            f = flavors[inst.flavor]
            insts.append(
                {
                    "id": inst.id,
                    "vcpus": f.vcpus,
                    "memory_mb": f.memory_mb,
                    "root_gb": f.root_gb,
                    "ephemeral_gb": f.ephemeral_gb,
                    "disk_gb": f.root_gb + f.ephemeral_gb + -(-f.swap_mb // 1024),
                    "dedicated": f.extra_specs.get("hw:cpu_policy") == "dedicated",
                    "cells": [list(c) for c in cells.get(inst.id, [])],
                }
            )
        out.append(
            {
                "name": h.name,
                "shared": [c.shared_cpus for c in h.numa_cells],
                "dedicated": [c.dedicated_cpus for c in h.numa_cells],
                "memory": [c.memory_mb for c in h.numa_cells],
                "cpu_ratio": h.cpu_allocation_ratio,
                "ram_ratio": h.ram_allocation_ratio,
                "disk_ratio": h.disk_allocation_ratio,
                "reserved_mb": h.reserved_memory_mb,
                "reserved_gb": h.reserved_disk_gb,
                "disk_gb": h.disk.hdd_gb + h.disk.ssd_gb,
                "aggregates": [{"name": a, "metadata": meta[a]} for a in h.aggregates],
                "capabilities": dict(h.capabilities),
                "traits": list(h.traits),
                "io_ops": h.io_ops,
                "instances": insts,
            }
        )
    return out
