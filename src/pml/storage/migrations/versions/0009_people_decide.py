# pyright: basic
"""Approvals are a person's: a paused workflow records the person's decision, and an API
key has a role (``agent`` or ``admin``; existing keys become ``agent``).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        # NULL while nobody has decided; "approved" or "denied" once a person has.
        batch_op.add_column(sa.Column("decision", sa.String(16), nullable=True))
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("role", sa.String(16), nullable=False, server_default="agent")
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("role")
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.drop_column("decision")
