# pyright: basic
"""Capability versions are append-only: the database refuses any UPDATE of a version row.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MESSAGE = "capability versions are append-only"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""
            CREATE FUNCTION pml_refuse_version_update() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION '{MESSAGE}';
            END;
            $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER capability_versions_append_only BEFORE UPDATE "
            "ON capability_versions FOR EACH ROW EXECUTE FUNCTION pml_refuse_version_update()"
        )
    else:
        op.execute(
            "CREATE TRIGGER capability_versions_append_only BEFORE UPDATE ON capability_versions "
            f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER capability_versions_append_only ON capability_versions")
        op.execute("DROP FUNCTION pml_refuse_version_update()")
    else:
        op.execute("DROP TRIGGER capability_versions_append_only")
