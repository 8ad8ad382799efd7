# pyright: basic
"""Stored discovery vectors and curation runs; capabilities indexed by last change.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # discovery reads the capabilities changed since its last look
    op.create_index(op.f("ix_capability_records_updated_at"), "capability_records", ["updated_at"])
    op.create_table(
        "discovery_vectors",
        sa.Column("item_key", sa.String(length=600), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("item_key", name=op.f("pk_discovery_vectors")),
    )
    op.create_table(
        "curation_runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("suggestions", JsonValue(), nullable=False),
        sa.Column("applied", JsonValue(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_curation_runs")),
    )
    op.create_index(
        op.f("ix_curation_runs_org_project_created_at"),
        "curation_runs",
        ["org", "project", "created_at"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_curation_runs_org_project_created_at"), table_name="curation_runs")
    op.drop_table("curation_runs")
    op.drop_table("discovery_vectors")
    op.drop_index(op.f("ix_capability_records_updated_at"), table_name="capability_records")
