# pyright: basic
"""How many active capabilities each project holds, kept by triggers.

``capability_counts`` has one row per (org, project): the active capabilities of the project
(MCP server records and archived capabilities do not count). Triggers on
``capability_records`` keep it in the same transaction as every insert, archive, restore,
move and delete, so the quota check reads one row instead of counting the project. Filled
from the records on upgrade.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COUNTED = "{row}.archived_at IS NULL AND {row}.record_type = 'capability'"
WATCHED = "archived_at, org, project, record_type"  # the columns that change what counts
TRIGGERS = ("inserted", "deleted", "left", "entered")


def _add(row: str) -> str:
    """Statements that count one more capability in ``row``'s project (SQLite)."""
    return (
        f"INSERT OR IGNORE INTO capability_counts (org, project, active) "
        f"VALUES ({row}.org, {row}.project, 0); "
        f"UPDATE capability_counts SET active = active + 1 "
        f"WHERE org = {row}.org AND project = {row}.project;"
    )


def _take(row: str) -> str:
    """The statement that counts one capability less in ``row``'s project."""
    return (
        "UPDATE capability_counts SET active = active - 1 "
        f"WHERE org = {row}.org AND project = {row}.project;"
    )


def upgrade() -> None:
    op.create_table(
        "capability_counts",
        sa.Column("org", sa.String(64), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("active", sa.Integer(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("org", "project", name="pk_capability_counts"),
    )
    op.execute(
        "INSERT INTO capability_counts (org, project, active) "
        "SELECT org, project, COUNT(*) FROM capability_records "
        f"WHERE {COUNTED.format(row='capability_records')} GROUP BY org, project"
    )
    if op.get_bind().dialect.name == "postgresql":
        old, new = COUNTED.format(row="OLD"), COUNTED.format(row="NEW")
        op.execute(
            f"""
            CREATE FUNCTION pml_count_capabilities() RETURNS trigger AS $$
            BEGIN
                IF TG_OP <> 'INSERT' AND {old} THEN
                    {_take("OLD")}
                END IF;
                IF TG_OP <> 'DELETE' AND {new} THEN
                    INSERT INTO capability_counts AS c (org, project, active)
                    VALUES (NEW.org, NEW.project, 1)
                    ON CONFLICT (org, project) DO UPDATE SET active = c.active + 1;
                END IF;
                RETURN NULL;
            END;
            $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER capability_records_counted "
            f"AFTER INSERT OR DELETE OR UPDATE OF {WATCHED} ON capability_records "
            "FOR EACH ROW EXECUTE FUNCTION pml_count_capabilities()"
        )
        return
    watched = f"UPDATE OF {WATCHED} ON capability_records"
    for name, event, row, body in (
        ("inserted", "INSERT ON capability_records", "NEW", _add("NEW")),
        ("deleted", "DELETE ON capability_records", "OLD", _take("OLD")),
        ("left", watched, "OLD", _take("OLD")),
        ("entered", watched, "NEW", _add("NEW")),
    ):
        op.execute(
            f"CREATE TRIGGER capability_records_counted_{name} AFTER {event} "
            f"WHEN {COUNTED.format(row=row)} BEGIN {body} END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER capability_records_counted ON capability_records")
        op.execute("DROP FUNCTION pml_count_capabilities()")
    else:
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER capability_records_counted_{name}")
    op.drop_table("capability_counts")
