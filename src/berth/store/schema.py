"""The database schema (SQLAlchemy Core): topology, inventory, instances, tokens, event log.

One schema for SQLite and PostgreSQL. Usage is never stored as a counter: a host's use is the
sum of its instances' exact footprints (`instances.placement`), and every change to a host bumps
`hosts.generation` in the same transaction that writes the change and its event. The Alembic
migrations in `berth/store/migrations` create exactly these tables (a test compares them).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

Json = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
Serial = BigInteger().with_variant(Integer(), "sqlite")
NAME = 255

regions = Table(
    "regions",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("description", Text, nullable=False, server_default=""),
    Column("created_at", Double, nullable=False),
    Column("parent", String(NAME), nullable=True),  # a region's geographic region (IDC level)
)

clusters = Table(
    "clusters",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("region", String(NAME), ForeignKey("regions.name"), nullable=False),
    Column("state", String(16), nullable=False, server_default="active"),
    Column("created_at", Double, nullable=False),
    Column("changed_at", Double, nullable=False),
)

pools = Table(
    "pools",
    metadata,
    Column("cluster", String(NAME), ForeignKey("clusters.name"), nullable=False),
    Column("name", String(NAME), nullable=False),
    Column("trait", String(NAME), nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    PrimaryKeyConstraint("cluster", "name"),
)

aggregates = Table(
    "aggregates",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("meta", Json, nullable=False),
)

pci_aliases = Table(
    "pci_aliases",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("device_type", String(NAME), nullable=False),
)

hosts = Table(
    "hosts",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("cluster", String(NAME), ForeignKey("clusters.name"), nullable=False),
    Column("pool", String(NAME), nullable=True),
    Column("spec", Json, nullable=False),  # the core Host model, less cells, enabled, heartbeat
    Column("enabled", Boolean, nullable=False),
    Column("last_heartbeat", Double, nullable=True),
    Column("generation", BigInteger, nullable=False, server_default="0"),
    Column("report", Json, nullable=True),  # the host's own view, from its latest report
    Column("report_ts", Double, nullable=True),
    Column("reconciled_ts", Double, nullable=True),
    Column("created_at", Double, nullable=False),
    Column("draining", Boolean, nullable=False, server_default="0"),  # no new placements
    Index("ix_hosts_cluster", "cluster"),
    ForeignKeyConstraint(
        ["cluster", "pool"], ["pools.cluster", "pools.name"], name="fk_hosts_pool_pools"
    ),
)

host_cells = Table(
    "host_cells",
    metadata,
    Column("host", String(NAME), ForeignKey("hosts.name", ondelete="CASCADE"), nullable=False),
    Column("cell", Integer, nullable=False),
    Column("shared_cpus", Integer, nullable=False),
    Column("dedicated_cpus", Integer, nullable=False),
    Column("memory_mb", BigInteger, nullable=False),
    Column("hugepages_mb", BigInteger, nullable=False),
    Column("pci", Json, nullable=False),  # device type -> count, local to this cell
    PrimaryKeyConstraint("host", "cell"),
)

flavors = Table(
    "flavors",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("spec", Json, nullable=False),  # the core Flavor model
    Column("created_at", Double, nullable=False),
)

images = Table(
    "images",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("architecture", String(NAME), nullable=True),
    Column("hypervisor_type", String(NAME), nullable=True),
    Column("required_traits", Json, nullable=False),
    Column("clusters", Json, nullable=True),  # clusters that hold the image; null = all
    Column("created_at", Double, nullable=False),
)

ip_pools = Table(
    "ip_pools",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("cluster", String(NAME), ForeignKey("clusters.name"), nullable=False),
    Column("cidr", String(64), nullable=False),
    Column("total", Integer, nullable=False),
    Column("used", Integer, nullable=False, server_default="0"),
    Column("created_at", Double, nullable=False),
)

# A deployment set belongs to a project: its key is (project, id), so two projects may each
# have a set `web` (docs/service.md, "Deployment sets"). An instance joins a set of its own
# project: `instances (project, server_group)` refers to `deployment_sets (project, id)`.
deployment_sets = Table(
    "deployment_sets",
    metadata,
    Column("id", String(NAME), nullable=False),
    Column("project", String(NAME), nullable=False),
    Column("policy", String(32), nullable=False),
    Column("max_per_host", Integer, nullable=False, server_default="1"),
    Column("max_size", Integer, nullable=True),
    Column("generation", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Double, nullable=False),
    Column("scope", String(16), nullable=False, server_default="host"),
    PrimaryKeyConstraint("project", "id"),
)

instances = Table(
    "instances",
    metadata,
    Column("id", String(NAME), primary_key=True),
    Column("project", String(NAME), nullable=False),
    Column("flavor", String(NAME), ForeignKey("flavors.name"), nullable=False),
    Column("host", String(NAME), ForeignKey("hosts.name"), nullable=False),
    Column("cluster", String(NAME), nullable=False),
    Column("server_group", String(NAME), nullable=True),
    Column("placement", Json, nullable=False),  # exact footprint: per-cell and host use
    Column("placement_id", String(NAME), nullable=True),
    Column("business_type", String(32), nullable=False, server_default="on-demand"),
    Column("preemptible", Boolean, nullable=False, server_default="0"),
    Column("migratable", Boolean, nullable=False, server_default="1"),
    Column("created_at", Double, nullable=False),
    Column("network", String(NAME), nullable=True),
    Index("ix_instances_host", "host"),
    Index("ix_instances_project", "project"),
    Index("ix_instances_server_group", "server_group"),
    Index("ix_instances_placement_id", "placement_id"),
    ForeignKeyConstraint(
        ["project", "server_group"],
        ["deployment_sets.project", "deployment_sets.id"],
        name="fk_instances_set_deployment_sets",
    ),
)

evictions = Table(
    "evictions",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("instance_id", String(NAME), nullable=False),
    Column("host", String(NAME), nullable=False),
    Column("project", String(NAME), nullable=False),
    Column("flavor", String(NAME), nullable=False),
    Column("reason", Text, nullable=False),
    Column("placement_id", String(NAME), nullable=True),
    Column("created_at", Double, nullable=False),
    sqlite_autoincrement=True,
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(NAME), nullable=False),
    Column("role", String(16), nullable=False),
    Column("project", String(NAME), nullable=True),
    Column("hash", String(64), nullable=False, unique=True),  # sha256 of the secret, hex
    Column("revoked", Boolean, nullable=False, server_default="0"),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=True),  # None: never expires
    Column("hosts", Json, nullable=True),  # an agent token's hosts
    Column("vm", String(NAME), nullable=True),  # a vm token's VM (docs/elastic.md, "agent")
    Column("elastic_group", String(NAME), nullable=True),  # a group-admin token's group
)

events = Table(
    "events",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("ts", Double, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("host", String(NAME), nullable=True),
    Column("generation", BigInteger, nullable=True),
    Column("replica", String(64), nullable=False),
    Column("payload", Json, nullable=False),
    sqlite_autoincrement=True,
)

idempotency = Table(
    "idempotency",
    metadata,
    Column("principal", String(NAME), nullable=False),
    Column("key", String(NAME), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("status", Integer, nullable=False),
    Column("response", Json, nullable=False),
    Column("created_at", Double, nullable=False),
    PrimaryKeyConstraint("principal", "key"),
)

placement_outcomes = Table(
    "placement_outcomes",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("ts", Double, nullable=False),
    Column("day", String(10), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("flavor", String(NAME), nullable=False),
    Column("project", String(NAME), nullable=False),
    Column("num_instances", Integer, nullable=False),
    Column("latency_ms", Double, nullable=False),
    Column("business_type", String(32), nullable=True),
    Column("detail", Text, nullable=True),  # chosen hosts, or the failure's explanation
    Column("why", Json, nullable=True),  # compact why this host (docs/why.md), when recorded
    Index("ix_placement_outcomes_day", "day"),
    sqlite_autoincrement=True,
)

# Defragmentation plans (docs/service.md): the planner's plan as stored, and one row per move.
# A step in state `migrating` holds its instance on both hosts: the instance row on the source and
# a migration allocation, an instance row `<id>@migrating` on the target (so every claim path,
# re-verification and audit sees it), until the move is confirmed or aborted.
defrag_plans = Table(
    "defrag_plans",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("cluster", String(NAME), ForeignKey("clusters.name"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("target", Json, nullable=False),
    Column("budget", Json, nullable=False),
    Column("before", Json, nullable=False),
    Column("after", Json, nullable=False),
    Column("achieved", Json, nullable=True),  # figures measured when the plan finished
    Column("generations", Json, nullable=False),
    Column("auto_confirm", Boolean, nullable=False, server_default="0"),
    Column("owner", String(64), nullable=True),  # the replica driving it, until lease_until
    Column("lease_until", Double, nullable=True),
    Column("reason", Text, nullable=True),
    Column("created_by", String(NAME), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Index("ix_defrag_plans_state", "state"),
)

defrag_steps = Table(
    "defrag_steps",
    metadata,
    Column(
        "plan_id", String(64), ForeignKey("defrag_plans.id", ondelete="CASCADE"), nullable=False
    ),
    Column("step", Integer, nullable=False),
    Column("wave", Integer, nullable=False),
    Column("instance_id", String(NAME), nullable=False),
    Column("flavor", String(NAME), nullable=False),
    Column("source", String(NAME), nullable=False),
    Column("target", String(NAME), nullable=False),
    Column("planned_target", String(NAME), nullable=False),
    Column("footprint", Json, nullable=False),  # exact use on `target`, by resource name
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Column("replans", Integer, nullable=False, server_default="0"),
    Column("updated_at", Double, nullable=False),
    PrimaryKeyConstraint("plan_id", "step"),
)

# Elastic worker pools (docs/elastic.md): groups with their quotas, one row per VM with its state
# (moves checked against `berth.elastic.model.TRANSITIONS` in one place, `elastic_vms`), every
# state change with its time (accounting reads it), the control-command log per VM, hook runs,
# and the power state of hosts (tidal management).
elastic_groups = Table(
    "elastic_groups",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("flavor", String(NAME), nullable=False),
    Column("image", String(NAME), nullable=True),
    Column("cores_per_vm", Integer, nullable=False),
    Column("slots_per_vm", Integer, nullable=False),
    Column("min_vms", Integer, nullable=False, server_default="0"),
    Column("max_vms", Integer, nullable=False, server_default="0"),
    Column("max_cores", Integer, nullable=True),
    Column("share", Double, nullable=False, server_default="1"),
    Column("queue", Json, nullable=False),  # the QueueSelector: system and its selectors
    Column("cluster", String(NAME), nullable=True),  # None: any cluster Berth places in
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

elastic_settings = Table(
    "elastic_settings",
    metadata,
    Column("name", String(64), primary_key=True),  # global_max_vms, global_max_cores
    Column("value", Json, nullable=True),
)

elastic_vms = Table(
    "elastic_vms",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("group", String(NAME), ForeignKey("elastic_groups.name"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("since", Double, nullable=False),
    Column("requested_at", Double, nullable=False),
    Column("attempt", Integer, nullable=False, server_default="1"),
    Column("cluster", String(NAME), nullable=True),
    Column("host", String(NAME), nullable=True),
    Column("server_id", String(NAME), nullable=True),
    Column("instance_id", String(NAME), nullable=True),  # Berth's placement claim
    Column("heartbeat", Double, nullable=True),
    Column("idle_since", Double, nullable=True),
    Column("running_jobs", Integer, nullable=False, server_default="0"),
    Column("cores", Integer, nullable=False),
    Column("token_id", String(32), nullable=True),  # the VM's agent token (role vm)
    Column("reason", Text, nullable=True),  # why it failed, was lost or retired
    Index("ix_elastic_vms_group_state", "group", "state"),
)

elastic_vm_states = Table(
    "elastic_vm_states",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("vm", String(NAME), nullable=False),
    Column("group", String(NAME), nullable=False),
    Column("state", String(16), nullable=False),
    Column("at", Double, nullable=False),
    Column("cores", Integer, nullable=False),
    Column("reason", Text, nullable=True),
    Index("ix_elastic_vm_states_vm", "vm"),
    Index("ix_elastic_vm_states_at", "at"),
    sqlite_autoincrement=True,
)

elastic_commands = Table(
    "elastic_commands",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("vm", String(NAME), ForeignKey("elastic_vms.name"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("args", Json, nullable=False),
    Column("state", String(16), nullable=False),
    Column("issued_at", Double, nullable=False),
    Column("delivered_at", Double, nullable=True),
    Column("finished_at", Double, nullable=True),
    Column("result", Text, nullable=True),
    Column("issued_by", String(NAME), nullable=False),
    Index("ix_elastic_commands_vm_state", "vm", "state"),
    sqlite_autoincrement=True,
)

elastic_hook_runs = Table(
    "elastic_hook_runs",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("vm", String(NAME), nullable=False),
    Column("event", String(16), nullable=False),  # join or leave
    Column("hook", String(NAME), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),  # ok or failed
    Column("exit_code", Integer, nullable=True),
    Column("output", Text, nullable=False, server_default=""),  # the output's tail
    Column("started_at", Double, nullable=False),
    Column("finished_at", Double, nullable=False),
    Column("next_retry", Double, nullable=True),  # a failed run: when to try again
    Index("ix_elastic_hook_runs_vm", "vm"),
    sqlite_autoincrement=True,
)

host_power = Table(
    "host_power",
    metadata,
    Column("host", String(NAME), primary_key=True),
    Column("power", String(8), nullable=False),  # on or off
    Column("since", Double, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("changed_by", String(NAME), nullable=False),
)

# What the elastic control loop must remember across restarts (docs/elastic.md, "control
# loop"): each group's and cluster's backoff and hysteresis history, and the demand samples the
# tidal power forecast reads.
elastic_backoff = Table(
    "elastic_backoff",
    metadata,
    Column("kind", String(16), nullable=False),  # group or cluster
    Column("name", String(NAME), nullable=False),
    Column("last_start", Double, nullable=True),
    Column("last_drain", Double, nullable=True),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("last_failure", Double, nullable=True),
    PrimaryKeyConstraint("kind", "name"),
)

elastic_demand = Table(
    "elastic_demand",
    metadata,
    Column("id", Serial, primary_key=True, autoincrement=True),
    Column("at", Double, nullable=False),
    Column("cores", Double, nullable=False),  # cores wanted: held by VMs plus one per idle job
    Index("ix_elastic_demand_at", "at"),
    sqlite_autoincrement=True,
)

# Clusters Berth drives through a cloud driver (docs/openstack.md, "How Berth drives a
# cluster"): the driver's kind and connection config (endpoints and a credential reference, never
# a secret), the change feed's cursor, and one row per server Berth boots or adopts. A row is
# written before the cloud is asked (state `intent`), so a retry or a restart finds the server by
# its name (the instance id).
cloud_clusters = Table(
    "cloud_clusters",
    metadata,
    Column("cluster", String(NAME), ForeignKey("clusters.name"), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("config", Json, nullable=False),
    Column("state", String(16), nullable=False),  # joining | joined | leaving
    Column("cursor", Text, nullable=True),
    Column("reconciled_at", Double, nullable=True),
    Column("created_at", Double, nullable=False),
    Column("changed_at", Double, nullable=False),
)

cloud_servers = Table(
    "cloud_servers",
    metadata,
    Column("instance_id", String(NAME), primary_key=True),
    Column("cluster", String(NAME), nullable=False),
    Column("server_id", String(NAME), nullable=True),  # None: the cloud has not answered yet
    Column("host", String(NAME), nullable=False),
    Column("flavor", String(NAME), nullable=False),
    Column("state", String(16), nullable=False),
    Column("fault", Text, nullable=True),
    Column("alternates", Json, nullable=False),  # hosts still to try, best first
    Column("tried", Json, nullable=False),  # [{host, error}] of the boots that failed
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Index("ix_cloud_servers_cluster", "cluster"),
    Index("ix_cloud_servers_server_id", "server_id"),
)
