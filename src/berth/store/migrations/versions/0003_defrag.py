"""Defragmentation: stored plans and their steps; a drain flag on hosts.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("draining", sa.Boolean(), server_default="0", nullable=False))
    op.create_table(
        "defrag_plans",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("target", JSON, nullable=False),
        sa.Column("budget", JSON, nullable=False),
        sa.Column("before", JSON, nullable=False),
        sa.Column("after", JSON, nullable=False),
        sa.Column("achieved", JSON, nullable=True),
        sa.Column("generations", JSON, nullable=False),
        sa.Column("auto_confirm", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.Double(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster"], ["clusters.name"], name=op.f("fk_defrag_plans_cluster_clusters")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_defrag_plans")),
    )
    with op.batch_alter_table("defrag_plans", schema=None) as batch_op:
        batch_op.create_index("ix_defrag_plans_state", ["state"], unique=False)
    op.create_table(
        "defrag_steps",
        sa.Column("plan_id", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("wave", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=255), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("planned_target", sa.String(length=255), nullable=False),
        sa.Column("footprint", JSON, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("replans", sa.Integer(), server_default="0", nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["defrag_plans.id"],
            name=op.f("fk_defrag_steps_plan_id_defrag_plans"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("plan_id", "step", name=op.f("pk_defrag_steps")),
    )


def downgrade() -> None:
    op.drop_table("defrag_steps")
    with op.batch_alter_table("defrag_plans", schema=None) as batch_op:
        batch_op.drop_index("ix_defrag_plans_state")
    op.drop_table("defrag_plans")
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("draining")
