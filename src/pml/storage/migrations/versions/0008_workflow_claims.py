# pyright: basic
"""Workflow states remember when a trace ingest claimed them.

A claim older than its lease was left by a request that died before ending it: another
request may take it over, so that the client's retry is learned instead of lost.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_at", UtcDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.drop_column("claimed_at")
