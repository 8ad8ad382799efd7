# pyright: basic
"""Upstream server state reported by the running gateway, for `pml status`.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "upstream_servers",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("transport", sa.String(length=8), nullable=False),
        sa.Column("tool_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_latency_ms", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("flagged_tools", JsonValue(), nullable=False),
        sa.Column("reported_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_upstream_servers")),
    )


def downgrade() -> None:
    op.drop_table("upstream_servers")
