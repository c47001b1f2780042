"""Initial schema: topology, inventory, catalogue, instances, tokens, event log.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "aggregates",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_aggregates")),
    )
    op.create_table(
        "deployment_sets",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("max_per_host", sa.Integer(), server_default="1", nullable=False),
        sa.Column("max_size", sa.Integer(), nullable=True),
        sa.Column("generation", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_sets")),
    )
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=True),
        sa.Column("replica", sa.String(length=64), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "evictions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("instance_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("placement_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evictions")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "flavors",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_flavors")),
    )
    op.create_table(
        "idempotency",
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("principal", "key", name=op.f("pk_idempotency")),
    )
    op.create_table(
        "images",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("architecture", sa.String(length=255), nullable=True),
        sa.Column("hypervisor_type", sa.String(length=255), nullable=True),
        sa.Column("required_traits", JSON, nullable=False),
        sa.Column("clusters", JSON, nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_images")),
    )
    op.create_table(
        "pci_aliases",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("device_type", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pci_aliases")),
    )
    op.create_table(
        "placement_outcomes",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("num_instances", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_outcomes")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.create_index("ix_placement_outcomes_day", ["day"], unique=False)

    op.create_table(
        "regions",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_regions")),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=True),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("revoked", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("hash", name=op.f("uq_tokens_hash")),
    )
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("region", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="active", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("changed_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["region"], ["regions.name"], name=op.f("fk_clusters_region_regions")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_clusters")),
    )
    op.create_table(
        "ip_pools",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("cidr", sa.String(length=64), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("used", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster"], ["clusters.name"], name=op.f("fk_ip_pools_cluster_clusters")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_ip_pools")),
    )
    op.create_table(
        "pools",
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("trait", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster"], ["clusters.name"], name=op.f("fk_pools_cluster_clusters")
        ),
        sa.PrimaryKeyConstraint("cluster", "name", name=op.f("pk_pools")),
    )
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=255), nullable=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("last_heartbeat", sa.Double(), nullable=True),
        sa.Column("generation", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("report", JSON, nullable=True),
        sa.Column("report_ts", sa.Double(), nullable=True),
        sa.Column("reconciled_ts", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster", "pool"], ["pools.cluster", "pools.name"], name="fk_hosts_pool_pools"
        ),
        sa.ForeignKeyConstraint(
            ["cluster"], ["clusters.name"], name=op.f("fk_hosts_cluster_clusters")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_hosts")),
    )
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.create_index("ix_hosts_cluster", ["cluster"], unique=False)

    op.create_table(
        "host_cells",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("cell", sa.Integer(), nullable=False),
        sa.Column("shared_cpus", sa.Integer(), nullable=False),
        sa.Column("dedicated_cpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.BigInteger(), nullable=False),
        sa.Column("hugepages_mb", sa.BigInteger(), nullable=False),
        sa.Column("pci", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["host"], ["hosts.name"], name=op.f("fk_host_cells_host_hosts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("host", "cell", name=op.f("pk_host_cells")),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("project", sa.String(length=255), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("server_group", sa.String(length=255), nullable=True),
        sa.Column("placement", JSON, nullable=False),
        sa.Column("placement_id", sa.String(length=255), nullable=True),
        sa.Column(
            "business_type", sa.String(length=32), server_default="on-demand", nullable=False
        ),
        sa.Column("preemptible", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("migratable", sa.Boolean(), server_default="1", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["flavor"], ["flavors.name"], name=op.f("fk_instances_flavor_flavors")
        ),
        sa.ForeignKeyConstraint(["host"], ["hosts.name"], name=op.f("fk_instances_host_hosts")),
        sa.ForeignKeyConstraint(
            ["server_group"],
            ["deployment_sets.id"],
            name=op.f("fk_instances_server_group_deployment_sets"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index("ix_instances_host", ["host"], unique=False)
        batch_op.create_index("ix_instances_placement_id", ["placement_id"], unique=False)
        batch_op.create_index("ix_instances_project", ["project"], unique=False)
        batch_op.create_index("ix_instances_server_group", ["server_group"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index("ix_instances_server_group")
        batch_op.drop_index("ix_instances_project")
        batch_op.drop_index("ix_instances_placement_id")
        batch_op.drop_index("ix_instances_host")

    op.drop_table("instances")
    op.drop_table("host_cells")
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_index("ix_hosts_cluster")

    op.drop_table("hosts")
    op.drop_table("pools")
    op.drop_table("ip_pools")
    op.drop_table("clusters")
    op.drop_table("tokens")
    op.drop_table("regions")
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.drop_index("ix_placement_outcomes_day")

    op.drop_table("placement_outcomes")
    op.drop_table("pci_aliases")
    op.drop_table("images")
    op.drop_table("idempotency")
    op.drop_table("flavors")
    op.drop_table("evictions")
    op.drop_table("events")
    op.drop_table("deployment_sets")
    op.drop_table("aggregates")
