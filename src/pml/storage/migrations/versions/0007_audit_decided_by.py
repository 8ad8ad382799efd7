# pyright: basic
"""Audit events: ``decided_by`` holds up to 200 characters; tails per scope read by id.

A rule name such as ``config:permissions.deny[3]:filesystem:write_*`` does not fit in 32
characters; ``pml audit tail`` and ``GET /api/audit`` page one org/project by id.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.alter_column(
            "decided_by",
            existing_type=sa.String(length=32),
            type_=sa.String(length=200),
            existing_nullable=True,
        )
        batch_op.create_index(
            batch_op.f("ix_audit_events_org_project_id"), ["org", "project", "id"], unique=False
        )


def downgrade() -> None:
    op.execute(
        "UPDATE audit_events SET decided_by = substr(decided_by, 1, 32) "
        "WHERE length(decided_by) > 32"
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_org_project_id"))
        batch_op.alter_column(
            "decided_by",
            existing_type=sa.String(length=200),
            type_=sa.String(length=32),
            existing_nullable=True,
        )
