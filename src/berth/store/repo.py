"""The repository facade: `Store`, every read and write the service makes, one transaction each.

`Store` is composed of one class per resource, each in its own module and each a `Database`
(`berth.store.db`: the engine, the transactions and the event append they share):

    snapshot.Snapshots  the snapshot, the event log, row counts
    topology.Topology   regions, clusters, pools, aggregates, PCI aliases
    hosts.Hosts         hosts, heartbeats, reports, reconciliation
    catalogue.Catalogue flavors, images, IP pools
    groups.Groups       deployment sets
    claims.Claims       `commit_placement` and `release`
    instances.Instances instances and evictions (reads)
    outcomes.Outcomes   idempotency records, placement outcomes, stats
    tokens.Tokens       bearer tokens
    elastic_groups.ElasticGroups      elastic groups, quotas, the global cap
    elastic_vms.ElasticVms            elastic VMs, their state machine, history, heartbeats
    elastic_commands.ElasticCommands  the control-command log of each VM
    elastic_hooks.ElasticHooks        join/leave hook runs, host power
    elastic_memory.ElasticMemory      the control loop's backoff history, demand samples
    clouds.Clouds       clusters driven through a cloud driver, the servers Berth boots

Why inheritance rather than a facade that forwards each call: the resource classes share no state
but the `Database` base and define disjoint method names (a test checks it), so `Store` is their
union with nothing to restate; every method keeps its one signature, written once where it is
implemented, and a new store method is one edit in its resource module. The resource modules
never import each other's classes: what two of them share is a module function (`read_hosts`,
`an_instance`, `free_ip`, `outcome_values`). The records callers use (`GroupRow`, `Outcome`, ...)
live in `berth.store.records` and are re-exported here, so that callers import the store from
one place.
"""

from __future__ import annotations

from berth.store.catalogue import Catalogue
from berth.store.claims import Claims
from berth.store.clouds import Clouds
from berth.store.db import make_engine, upgrade
from berth.store.elastic_commands import ElasticCommands
from berth.store.elastic_groups import ElasticGroups
from berth.store.elastic_hooks import ElasticHooks
from berth.store.elastic_memory import ElasticMemory
from berth.store.elastic_vms import ElasticVms
from berth.store.groups import Groups
from berth.store.hosts import Hosts
from berth.store.instances import Instances
from berth.store.outcomes import Outcomes, day_of
from berth.store.records import (
    CloudClusterRow,
    ClusterRow,
    CommitResult,
    EventRow,
    GroupRow,
    HostCapacity,
    HostRecord,
    Idempotent,
    InstanceRow,
    NewInstance,
    Outcome,
    OutcomeRow,
    PoolRow,
    ServerRecord,
    Snapshot,
    TokenRow,
    instance_set_key,
    set_key,
    split_set_key,
)
from berth.store.snapshot import Snapshots
from berth.store.tokens import Tokens, hash_token, is_expired
from berth.store.topology import Topology

__all__ = [
    "CloudClusterRow",
    "ClusterRow",
    "CommitResult",
    "EventRow",
    "GroupRow",
    "HostCapacity",
    "HostRecord",
    "Idempotent",
    "InstanceRow",
    "NewInstance",
    "Outcome",
    "OutcomeRow",
    "PoolRow",
    "ServerRecord",
    "Snapshot",
    "Store",
    "TokenRow",
    "day_of",
    "hash_token",
    "instance_set_key",
    "is_expired",
    "set_key",
    "split_set_key",
]

RESOURCES = (
    Snapshots,
    Topology,
    Hosts,
    Catalogue,
    Groups,
    Claims,
    Instances,
    Outcomes,
    Tokens,
    ElasticGroups,
    ElasticVms,
    ElasticCommands,
    ElasticHooks,
    ElasticMemory,
    Clouds,
)


class Store(
    Snapshots,
    Topology,
    Hosts,
    Catalogue,
    Groups,
    Claims,
    Instances,
    Outcomes,
    Tokens,
    ElasticGroups,
    ElasticVms,
    ElasticCommands,
    ElasticHooks,
    ElasticMemory,
    Clouds,
):
    """All database access. Thread-safe: each call runs its own transaction."""

    @classmethod
    def open(cls, url: str, *, replica: str = "local", migrate: bool = True) -> Store:
        store = cls(make_engine(url), replica)
        if migrate:
            upgrade(store.engine)
        return store

    def close(self) -> None:
        self.engine.dispose()
