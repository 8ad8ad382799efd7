# pyright: basic
"""What a capability learns from its use: the intents that led to it, and how its last runs
went.

``capability_intents`` keeps the distinct intents a capability was asked for with (at
capture, when its code runs again under another intent, when it is called by name, renamed
or curated), one row per capability and normalised text (its SHA-256), bounded per
capability by the registry. ``capability_records`` gains the outcome of its last runs
(``recent_outcomes``: a bit per run, the newest in the lowest bit; ``recent_runs``: how many
of those bits count, at most 10) and a moving average of their latency.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capability_intents",
        sa.Column(
            "fqdn",
            sa.String(400),
            sa.ForeignKey(
                "capability_records.fqdn",
                name="fk_capability_intents_fqdn_capability_records",
                ondelete="CASCADE",
            ),
            primary_key=True,
        ),
        sa.Column("text_hash", sa.String(64), primary_key=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("first_seen_at", UtcDateTime(), nullable=False),
        sa.Column("last_seen_at", UtcDateTime(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False, server_default="1"),
        sa.PrimaryKeyConstraint("fqdn", "text_hash", name="pk_capability_intents"),
    )
    op.create_index("ix_capability_intents_last_seen_at", "capability_intents", ["last_seen_at"])
    with op.batch_alter_table("capability_records", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("recent_outcomes", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("recent_runs", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("recent_latency_ms", sa.Float(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    # Plain ALTER TABLE on both backends (SQLite >= 3.35): a batch copy of the table would
    # break the history triggers that name it.
    for column in ("recent_latency_ms", "recent_runs", "recent_outcomes"):
        op.execute(f"ALTER TABLE capability_records DROP COLUMN {column}")
    op.drop_index("ix_capability_intents_last_seen_at", table_name="capability_intents")
    op.drop_table("capability_intents")
