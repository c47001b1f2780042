"""Elastic worker pools: groups and quotas, VMs, their state history, the command log, hook
runs, host power; vm and group-admin token scopes (docs/elastic.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "elastic_groups",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("image", sa.String(length=255), nullable=True),
        sa.Column("cores_per_vm", sa.Integer(), nullable=False),
        sa.Column("slots_per_vm", sa.Integer(), nullable=False),
        sa.Column("min_vms", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_vms", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_cores", sa.Integer(), nullable=True),
        sa.Column("share", sa.Double(), server_default="1", nullable=False),
        sa.Column("queue", JSON, nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_elastic_groups")),
    )
    op.create_table(
        "elastic_hook_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("vm", sa.String(length=255), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("hook", sa.String(length=255), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output", sa.Text(), server_default="", nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("finished_at", sa.Double(), nullable=False),
        sa.Column("next_retry", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_elastic_hook_runs")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("elastic_hook_runs", schema=None) as batch_op:
        batch_op.create_index("ix_elastic_hook_runs_vm", ["vm"], unique=False)

    op.create_table(
        "elastic_settings",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", JSON, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_elastic_settings")),
    )
    op.create_table(
        "elastic_vm_states",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("vm", sa.String(length=255), nullable=False),
        sa.Column("group", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("cores", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_elastic_vm_states")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("elastic_vm_states", schema=None) as batch_op:
        batch_op.create_index("ix_elastic_vm_states_at", ["at"], unique=False)
        batch_op.create_index("ix_elastic_vm_states_vm", ["vm"], unique=False)

    op.create_table(
        "host_power",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("power", sa.String(length=8), nullable=False),
        sa.Column("since", sa.Double(), nullable=False),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("changed_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_host_power")),
    )
    op.create_table(
        "elastic_vms",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("group", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("since", sa.Double(), nullable=False),
        sa.Column("requested_at", sa.Double(), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default="1", nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("server_id", sa.String(length=255), nullable=True),
        sa.Column("instance_id", sa.String(length=255), nullable=True),
        sa.Column("heartbeat", sa.Double(), nullable=True),
        sa.Column("idle_since", sa.Double(), nullable=True),
        sa.Column("running_jobs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cores", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["group"], ["elastic_groups.name"], name=op.f("fk_elastic_vms_group_elastic_groups")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_elastic_vms")),
    )
    with op.batch_alter_table("elastic_vms", schema=None) as batch_op:
        batch_op.create_index("ix_elastic_vms_group_state", ["group", "state"], unique=False)

    op.create_table(
        "elastic_commands",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("vm", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("args", JSON, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("issued_at", sa.Double(), nullable=False),
        sa.Column("delivered_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("issued_by", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["vm"], ["elastic_vms.name"], name=op.f("fk_elastic_commands_vm_elastic_vms")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_elastic_commands")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("elastic_commands", schema=None) as batch_op:
        batch_op.create_index("ix_elastic_commands_vm_state", ["vm", "state"], unique=False)

    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("vm", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("elastic_group", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("elastic_group")
        batch_op.drop_column("vm")

    with op.batch_alter_table("elastic_commands", schema=None) as batch_op:
        batch_op.drop_index("ix_elastic_commands_vm_state")

    op.drop_table("elastic_commands")
    with op.batch_alter_table("elastic_vms", schema=None) as batch_op:
        batch_op.drop_index("ix_elastic_vms_group_state")

    op.drop_table("elastic_vms")
    op.drop_table("host_power")
    with op.batch_alter_table("elastic_vm_states", schema=None) as batch_op:
        batch_op.drop_index("ix_elastic_vm_states_vm")
        batch_op.drop_index("ix_elastic_vm_states_at")

    op.drop_table("elastic_vm_states")
    op.drop_table("elastic_settings")
    with op.batch_alter_table("elastic_hook_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_elastic_hook_runs_vm")

    op.drop_table("elastic_hook_runs")
    op.drop_table("elastic_groups")
