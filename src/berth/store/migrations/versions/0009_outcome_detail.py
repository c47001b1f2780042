"""Placement outcomes keep the request's business type and a detail line: the chosen hosts of
a success, the explanation of a failure ("0/N hosts fit: ..."), for the dashboard's decision
stream (docs/dashboard.md). Existing rows keep NULL in both.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("business_type", sa.String(32), nullable=True))
        batch_op.add_column(sa.Column("detail", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.drop_column("detail")
        batch_op.drop_column("business_type")
