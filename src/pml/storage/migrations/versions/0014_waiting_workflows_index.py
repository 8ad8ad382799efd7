# pyright: basic
"""Workflow states are counted per user: the pending-workflows quota.

``[limits] pending_workflows_per_user`` counts a user's live approvals and hand-offs before
another is stored; this index makes that one range read (it also serves the listings of
one user's approvals).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

COLUMNS = ["org", "project", "user_id", "kind", "expires_at"]


def upgrade() -> None:
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_workflow_state_org_project_user_id_kind_expires_at"),
            COLUMNS,
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workflow_state_org_project_user_id_kind_expires_at"))
