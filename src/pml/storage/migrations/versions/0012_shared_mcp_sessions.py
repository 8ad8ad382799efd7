# pyright: basic
"""MCP sessions shared by every replica: ``mcp_sessions`` records each 2025-11-25 session
(the SHA-256 of its id, the digest of its owner, the negotiated protocol version and the
client's initialize params), so that any ``pml serve --http`` on the same database serves
a session another one opened.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_sessions",
        sa.Column("session_hash", sa.String(64), primary_key=True),
        sa.Column("owner_hash", sa.String(64), nullable=False),
        sa.Column("org", sa.String(64), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("protocol_version", sa.String(32), nullable=False),
        sa.Column("client", JsonValue(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("last_seen_at", UtcDateTime(), nullable=False),
        sa.Column("closed_at", UtcDateTime(), nullable=True),
    )
    op.create_index("ix_mcp_sessions_last_seen_at", "mcp_sessions", ["last_seen_at"])


def downgrade() -> None:
    op.drop_index("ix_mcp_sessions_last_seen_at", table_name="mcp_sessions")
    op.drop_table("mcp_sessions")
