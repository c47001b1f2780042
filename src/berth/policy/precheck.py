"""Pipeline step 1 and the preemptible limit: which clusters may take a request at all.

Nothing here looks at hosts: the image is in the IDC, the flavor is offered there, the cluster
is enabled and one of its networks has the free IPs (docs/policy.md, "The pipeline"). Each
rejected cluster keeps its reason.
"""

from __future__ import annotations

from berth.policy.catalogue import Catalogue
from berth.policy.model import Policy
from berth.policy.outcome import ClusterRejection, ScheduleRequest
from berth.policy.topology import Cluster, Idc, Topology

Route = tuple[Cluster, str | None]
"""A cluster that passed the pre-check and the network the request would use there."""


def precheck(
    topology: Topology,
    catalogue: Catalogue,
    request: ScheduleRequest,
    idcs: list[Idc],
    base: str,
) -> tuple[list[Route], list[ClusterRejection]]:
    """The clusters of the request's IDCs that pass, and the reasons of those that do not."""
    rejections: list[ClusterRejection] = []
    routes: list[Route] = []
    for idc in idcs:
        idc_reason = None
        if request.image is not None and request.image not in idc.images:
            idc_reason = ("image_missing", f"image {request.image} is not in IDC {idc.name}")
        elif not catalogue.offered(base, idc.offered):
            idc_reason = ("flavor_not_offered", f"flavor {base} is not offered in IDC {idc.name}")
        for cluster in topology.clusters_of(idc.name):
            if idc_reason is not None:
                code, msg = idc_reason
            elif not cluster.enabled:
                code, msg = "cluster_disabled", "cluster is disabled"
            else:
                code, msg, net = network_for(cluster, request)
                if not code:
                    routes.append((cluster, net))
                    continue
            rejections.append(ClusterRejection(cluster.name, idc.name, "precheck", code, msg))
    return routes, rejections


def network_for(cluster: Cluster, request: ScheduleRequest) -> tuple[str, str, str | None]:
    """('', '', network) when a network has the IPs, else (code, message, None)."""
    if request.network is not None:
        free = cluster.networks.get(request.network)
        if free is None:
            return "network_missing", f"no network {request.network}", None
        if free < request.count:
            return (
                "insufficient_ips",
                f"network {request.network} has {free} free IPs, need {request.count}",
                None,
            )
        return "", "", request.network
    if not cluster.networks:
        return "insufficient_ips", "cluster has no networks", None
    name, free = max(cluster.networks.items(), key=lambda kv: (kv[1], kv[0]))
    if free < request.count:
        return (
            "insufficient_ips",
            f"most free IPs in one network: {free} ({name}), need {request.count}",
            None,
        )
    return "", "", name


def preemptible_limit(policy: Policy, idc: str) -> int | None:
    """The most preemptible instances the IDC may run (None: no limit)."""
    limits = policy.preemptible_limits
    return limits.idcs.get(idc, limits.default)


def within_preemptible_limits(
    topology: Topology,
    policy: Policy,
    request: ScheduleRequest,
    routes: list[Route],
    rejections: list[ClusterRejection],
) -> list[Route]:
    """The routes whose IDC can run the request's preemptible instances; the others are
    added to `rejections`."""
    kept = []
    for cluster, net in routes:
        limit = preemptible_limit(policy, cluster.idc)
        if limit is None:
            kept.append((cluster, net))
            continue
        current = topology.preemptible_count(cluster.idc)
        if current + request.count <= limit:
            kept.append((cluster, net))
            continue
        more = "" if current >= limit else f"; {request.count} more would exceed it"
        rejections.append(
            ClusterRejection(
                cluster.name,
                cluster.idc,
                "preemptible_limit",
                "preemptible_limit",
                f"IDC {cluster.idc} runs {current} preemptible instances, limit {limit}{more}",
            )
        )
    return kept
