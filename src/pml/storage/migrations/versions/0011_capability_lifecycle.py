# pyright: basic
"""The life of a capability: archived and deprecated records, version tags set after the
fact, and history that is deleted only with an archived capability.

- ``capability_records`` gains ``archived_at``/``archived_by`` (an archived record keeps its
  FQDN, versions and history but leaves lists, tools and name resolution), the aliases it
  held while archived (``archived_aliases``: names are freed, restoring brings back those
  still free), and ``deprecated_at``/``deprecated_by``/``deprecation_message``/
  ``replaced_by``.
- The unique names, tool names and code hashes of a scope count active records only
  (partial indexes): an archived capability frees its name and its code.
- ``capability_version_tags``: one semantic tag per version and per capability, immutable
  once set; tags written with a version until now are copied in.
- Version and tag rows can be deleted only with their archived capability (``pml cap
  purge``); the database refuses any other DELETE, as it refuses any UPDATE.
- ``deployment_state``: small facts a deployment remembers between starts (the ``[routing]``
  patterns stored routing was last derived from).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

ACTIVE = "archived_at IS NULL"
UNIQUE_IN_SCOPE = ("display_name", "tool_name", "code_hash")
KEPT_MESSAGE = "capability history is deleted only with its archived capability"
TAG_MESSAGE = "version tags are immutable"
HISTORY_TABLES = ("capability_versions", "capability_version_tags")


def upgrade() -> None:
    with op.batch_alter_table("capability_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("archived_at", UtcDateTime(), nullable=True))
        batch_op.add_column(sa.Column("archived_by", sa.String(128), nullable=True))
        batch_op.add_column(sa.Column("archived_aliases", JsonValue(), nullable=True))
        batch_op.add_column(sa.Column("deprecated_at", UtcDateTime(), nullable=True))
        batch_op.add_column(sa.Column("deprecated_by", sa.String(128), nullable=True))
        batch_op.add_column(sa.Column("deprecation_message", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("replaced_by", sa.String(400), nullable=True))
    for column in UNIQUE_IN_SCOPE:
        name = f"ix_capability_records_org_project_{column}"
        op.drop_index(name, table_name="capability_records")
        op.create_index(
            name,
            "capability_records",
            ["org", "project", column],
            unique=True,
            sqlite_where=sa.text(ACTIVE),
            postgresql_where=sa.text(ACTIVE),
        )
    op.create_table(
        "capability_version_tags",
        sa.Column(
            "capability_fqdn",
            sa.String(400),
            sa.ForeignKey(
                "capability_records.fqdn",
                ondelete="CASCADE",
                name="fk_capability_version_tags_capability_fqdn_capability_records",
            ),
            nullable=False,
        ),
        sa.Column("tag", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("capability_fqdn", "tag", name="pk_capability_version_tags"),
        sa.UniqueConstraint(
            "capability_fqdn", "version", name="uq_capability_version_tags_capability_fqdn_version"
        ),
    )
    # Tags written with a version until now (the lowest version keeps a repeated tag).
    op.execute(
        "INSERT INTO capability_version_tags "
        "(capability_fqdn, tag, version, created_by, created_at) "
        "SELECT v.capability_fqdn, v.version_tag, v.version, v.updated_by, v.updated_at "
        "FROM capability_versions v WHERE v.version_tag IS NOT NULL AND NOT EXISTS ("
        "SELECT 1 FROM capability_versions w WHERE w.capability_fqdn = v.capability_fqdn "
        "AND w.version_tag = v.version_tag AND w.version < v.version)"
    )
    _history_triggers()
    op.create_table(
        "deployment_state",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_deployment_state"),
    )


def _history_triggers() -> None:
    kept = (
        "EXISTS (SELECT 1 FROM capability_records r "
        "WHERE r.fqdn = OLD.capability_fqdn AND r.archived_at IS NULL)"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""
            CREATE FUNCTION pml_keep_capability_history() RETURNS trigger AS $$
            BEGIN
                IF {kept} THEN
                    RAISE EXCEPTION '{KEPT_MESSAGE}';
                END IF;
                RETURN OLD;
            END;
            $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            f"""
            CREATE FUNCTION pml_refuse_tag_update() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION '{TAG_MESSAGE}';
            END;
            $$ LANGUAGE plpgsql
            """
        )
        for table in HISTORY_TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_kept BEFORE DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION pml_keep_capability_history()"
            )
        op.execute(
            "CREATE TRIGGER capability_version_tags_immutable BEFORE UPDATE "
            "ON capability_version_tags FOR EACH ROW EXECUTE FUNCTION pml_refuse_tag_update()"
        )
    else:
        for table in HISTORY_TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_kept BEFORE DELETE ON {table} WHEN {kept} "
                f"BEGIN SELECT RAISE(ABORT, '{KEPT_MESSAGE}'); END"
            )
        op.execute(
            "CREATE TRIGGER capability_version_tags_immutable BEFORE UPDATE "
            f"ON capability_version_tags BEGIN SELECT RAISE(ABORT, '{TAG_MESSAGE}'); END"
        )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.drop_table("deployment_state")
    for table in HISTORY_TABLES:
        op.execute(f"DROP TRIGGER {table}_kept" + (f" ON {table}" if postgres else ""))
    op.execute(
        "DROP TRIGGER capability_version_tags_immutable"
        + (" ON capability_version_tags" if postgres else "")
    )
    if postgres:
        op.execute("DROP FUNCTION pml_keep_capability_history()")
        op.execute("DROP FUNCTION pml_refuse_tag_update()")
    op.drop_table("capability_version_tags")
    # Archived records go with the columns that mark them (they would break unique names).
    op.execute("DELETE FROM capability_records WHERE archived_at IS NOT NULL")
    for column in UNIQUE_IN_SCOPE:
        name = f"ix_capability_records_org_project_{column}"
        op.drop_index(name, table_name="capability_records")
        op.create_index(name, "capability_records", ["org", "project", column], unique=True)
    with op.batch_alter_table("capability_records", schema=None) as batch_op:
        for column in (
            "replaced_by",
            "deprecation_message",
            "deprecated_by",
            "deprecated_at",
            "archived_aliases",
            "archived_by",
            "archived_at",
        ):
            batch_op.drop_column(column)
