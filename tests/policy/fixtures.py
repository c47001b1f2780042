"""A small policy and topology for the pipeline tests, built from plain dicts (the file format)."""

from __future__ import annotations

import copy
from typing import Any

from berth.policy.model import Policy, TopologySpec
from berth.policy.pipeline import PolicyEngine

NOW = 2_000_000.0

PINNED = {"hw:cpu_policy": "dedicated"}
DPDK = {"pci_passthrough:alias": "dpdk-vf:1"}

POLICY: dict[str, Any] = {
    "pools": [
        {"name": "shared", "traits": ["CUSTOM_POOL_SHARED"]},
        {"name": "dpdk", "traits": ["CUSTOM_POOL_DPDK"]},
        {"name": "enterprise", "traits": ["CUSTOM_POOL_ENTERPRISE"]},
        {"name": "gpu", "traits": ["CUSTOM_POOL_GPU"]},
    ],
    "families": [
        {"name": "compute", "pool": "shared"},
        {"name": "gpu", "pool": "gpu"},
    ],
    "flavors": [
        {"name": "v.c.small", "family": "compute", "vcpus": 2, "memory_mb": 2048},
        {"name": "v.c.large", "family": "compute", "vcpus": 4, "memory_mb": 4096},
        {"name": "v.c.huge", "family": "compute", "vcpus": 8, "memory_mb": 8192},
        {"name": "v.gpu", "family": "gpu", "vcpus": 2, "memory_mb": 2048},
    ],
    "variants": [
        {
            "name": "dpdk-numa1",
            "suffix": ".n1.dpdk",
            "pool": "dpdk",
            "families": ["compute"],
            "extra_specs": {**PINNED, "hw:numa_nodes": 1, **DPDK},
        },
        {
            "name": "dpdk-numa2",
            "suffix": ".dpdk",
            "pool": "dpdk",
            "families": ["compute"],
            "extra_specs": {**PINNED, "hw:numa_nodes": 2, **DPDK},
        },
        {"name": "numa1", "suffix": ".n1", "extra_specs": {**PINNED, "hw:numa_nodes": 1}},
        {"name": "numa2", "suffix": "", "extra_specs": {**PINNED, "hw:numa_nodes": 2}},
        {
            "name": "flex",
            "suffix": ".flex",
            "families": ["compute"],
            "extra_specs": {**PINNED, "hw:numa_nodes": 2, "berth:numa_split": "flexible"},
        },
    ],
    "pci_aliases": [{"name": "dpdk-vf", "device_type": "vf-dpdk"}],
    "business": {
        "on-demand": {
            "variants": ["dpdk-numa1", "dpdk-numa2", "numa1", "numa2"],
            "may_preempt": True,
        },
        "auto-scaling": {"variants": ["numa1"]},
        "preemptible": {"variants": ["numa2"]},
    },
    "users": [
        {"user": "bigdata", "business": "preemptible", "variants": ["flex", "numa2"]},
        {"user": "bank", "pool": "enterprise", "variants": ["numa1", "numa2"]},
        {"user": "game", "business": "auto-scaling", "may_preempt": True},
    ],
    "preemptible_limits": {"default": 100, "idcs": {"idc-b": 2}},
    "deployment_sets": {"max_size": 4, "scope": "host"},
    "placement": {"cluster_choice": "most-capacity", "profile": "pack"},
}


def host(
    name: str,
    pool: str = "shared",
    *,
    pcpus: int = 8,
    mem: int = 16384,
    cells: int = 2,
    rack: str | None = None,
    enabled: bool = True,
) -> dict[str, Any]:
    cell: dict[str, Any] = {"dedicated_cpus": pcpus, "memory_mb": mem}
    if pool == "dpdk":
        cell["pci"] = {"vf-dpdk": 4}
    return {
        "name": name,
        "traits": [f"CUSTOM_POOL_{pool.upper()}"],
        "last_heartbeat": NOW,
        "enabled": enabled,
        "rack": rack,
        "disk": {"hdd_gb": 1000},
        "numa_cells": [dict(cell) for _ in range(cells)],
    }


def cluster(
    name: str,
    hosts: list[dict[str, Any]],
    instances: list[dict[str, Any]] | None = None,
    *,
    ips: int = 100,
    enabled: bool = True,
) -> dict[str, Any]:
    return {
        "name": name,
        "enabled": enabled,
        "networks": [{"name": f"{name}-net", "free_ips": ips}],
        "hosts": hosts,
        "instances": instances or [],
    }


def topology(
    clusters_a: list[dict[str, Any]],
    clusters_b: list[dict[str, Any]] | None = None,
    *,
    sets: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Region r1 with IDC idc-a (these clusters) and IDC idc-b (no GPU flavors offered)."""
    idcs = [{"name": "idc-a", "images": ["centos", "ubuntu"], "clusters": clusters_a}]
    if clusters_b is not None:
        idcs.append(
            {
                "name": "idc-b",
                "images": ["centos"],
                "flavors": ["compute"],
                "clusters": clusters_b,
            }
        )
    return {
        "now": NOW,
        "regions": [{"name": "r1", "idcs": idcs}],
        "deployment_sets": sets or [],
    }


def engine(topo: dict[str, Any], **policy_changes: Any) -> PolicyEngine:
    raw = copy.deepcopy(POLICY)
    for key, value in policy_changes.items():
        raw[key] = value
    return PolicyEngine(Policy.model_validate(raw), TopologySpec.model_validate(topo))


def inst(
    iid: str,
    host_name: str,
    flavor: str,
    business: str = "on-demand",
    *,
    created: float = 0.0,
    user: str = "default",
    ds: str | None = None,
) -> dict[str, Any]:
    return {
        "id": iid,
        "host": host_name,
        "flavor": flavor,
        "business": business,
        "created_at": created,
        "user": user,
        "deployment_set": ds,
    }
