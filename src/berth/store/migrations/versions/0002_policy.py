"""Policy layer: IDCs under regions, deployment-set scope, an instance's network.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("regions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent", sa.String(length=255), nullable=True))
    with op.batch_alter_table("deployment_sets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("scope", sa.String(length=16), server_default="host", nullable=False)
        )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("network", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("network")
    with op.batch_alter_table("deployment_sets", schema=None) as batch_op:
        batch_op.drop_column("scope")
    with op.batch_alter_table("regions", schema=None) as batch_op:
        batch_op.drop_column("parent")
