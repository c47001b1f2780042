"""Placement outcomes keep a compact "why this host" (docs/why.md, "In the decision stream"):
per instance the deciding weigher, the margin over the runner-up, the kind of draw, and the top
candidates' per-weigher breakdown, as JSON. Written only for a placement asked with
`why=true`, or for every decision of a replica run with `berth serve --why-all`; other rows,
and rows written before this revision, keep NULL.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("why", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("placement_outcomes", schema=None) as batch_op:
        batch_op.drop_column("why")
