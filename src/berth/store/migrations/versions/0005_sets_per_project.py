"""Deployment sets per project: their key becomes (project, id).

An instance joins a set of its own project, so `instances (project, server_group)` now refers to
`deployment_sets (project, id)`. Existing rows are kept: a set that already held instances of
another project than its own (which only a topology or fleet load could write) is copied into
each such project, generation and all, so that every member keeps a set.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COPY_INTO_MEMBER_PROJECTS = """
INSERT INTO deployment_sets (id, project, policy, max_per_host, max_size, generation,
                             created_at, scope)
SELECT DISTINCT s.id, i.project, s.policy, s.max_per_host, s.max_size, s.generation,
       s.created_at, s.scope
FROM instances i JOIN deployment_sets s ON s.id = i.server_group
WHERE i.project <> s.project
"""


def upgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_constraint("fk_instances_server_group_deployment_sets", type_="foreignkey")
    with op.batch_alter_table("deployment_sets", schema=None) as batch_op:
        batch_op.drop_constraint("pk_deployment_sets", type_="primary")
        batch_op.create_primary_key("pk_deployment_sets", ["project", "id"])
    op.execute(_COPY_INTO_MEMBER_PROJECTS)
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_instances_set_deployment_sets",
            "deployment_sets",
            ["project", "server_group"],
            ["project", "id"],
        )


def downgrade() -> None:
    """Back to global ids: only possible while no two projects share a set id."""
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_constraint("fk_instances_set_deployment_sets", type_="foreignkey")
    with op.batch_alter_table("deployment_sets", schema=None) as batch_op:
        batch_op.drop_constraint("pk_deployment_sets", type_="primary")
        batch_op.create_primary_key("pk_deployment_sets", ["id"])
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_instances_server_group_deployment_sets",
            "deployment_sets",
            ["server_group"],
            ["id"],
        )
