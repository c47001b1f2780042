"""What the elastic control loop remembers across restarts: `elastic_backoff` (each group's and
cluster's backoff and hysteresis history) and `elastic_demand` (the demand samples the tidal
power forecast reads) (docs/elastic.md).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "elastic_backoff",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("last_start", sa.Double(), nullable=True),
        sa.Column("last_drain", sa.Double(), nullable=True),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_failure", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("kind", "name", name=op.f("pk_elastic_backoff")),
    )
    op.create_table(
        "elastic_demand",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("cores", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_elastic_demand")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("elastic_demand", schema=None) as batch_op:
        batch_op.create_index("ix_elastic_demand_at", ["at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("elastic_demand", schema=None) as batch_op:
        batch_op.drop_index("ix_elastic_demand_at")
    op.drop_table("elastic_demand")
    op.drop_table("elastic_backoff")
