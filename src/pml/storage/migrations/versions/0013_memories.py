# pyright: basic
"""What PML remembers for a person: ``memories`` holds each fact a memory post-hook or a
person stored (its text, sensitivity, where it came from and when), once per user: the
SHA-256 of the normalised text is unique per org, project and user.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import UtcDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("org", sa.String(64), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("sensitivity", sa.String(16), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("text_hash", sa.String(64), nullable=False),
        sa.UniqueConstraint(
            "org",
            "project",
            "user_id",
            "text_hash",
            name="uq_memories_org_project_user_id_text_hash",
        ),
    )
    op.create_index(
        "ix_memories_org_project_user_id_created_at",
        "memories",
        ["org", "project", "user_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_memories_org_project_user_id_created_at", table_name="memories")
    op.drop_table("memories")
