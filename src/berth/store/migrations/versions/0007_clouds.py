"""Clusters driven through a cloud driver and the servers Berth boots in them:
`cloud_clusters` and `cloud_servers` (docs/openstack.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cloud_clusters",
        sa.Column("cluster", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("reconciled_at", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("changed_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster"], ["clusters.name"], name="fk_cloud_clusters_cluster_clusters"
        ),
        sa.PrimaryKeyConstraint("cluster", name="pk_cloud_clusters"),
    )
    op.create_table(
        "cloud_servers",
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("cluster", sa.String(255), nullable=False),
        sa.Column("server_id", sa.String(255), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("flavor", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("fault", sa.Text(), nullable=True),
        sa.Column("alternates", JSON, nullable=False),
        sa.Column("tried", JSON, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name="pk_cloud_servers"),
    )
    op.create_index("ix_cloud_servers_cluster", "cloud_servers", ["cluster"])
    op.create_index("ix_cloud_servers_server_id", "cloud_servers", ["server_id"])


def downgrade() -> None:
    op.drop_index("ix_cloud_servers_server_id", table_name="cloud_servers")
    op.drop_index("ix_cloud_servers_cluster", table_name="cloud_servers")
    op.drop_table("cloud_servers")
    op.drop_table("cloud_clusters")
