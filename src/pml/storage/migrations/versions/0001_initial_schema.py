# pyright: basic
"""Initial schema: capabilities, aliases, versions, catalog, usage, traces, state, audit.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("revoked_at", UtcDateTime(), nullable=True),
        sa.Column("last_used_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_api_keys_org_project"), ["org", "project"], unique=False
        )

    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("ts", UtcDateTime(), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=True),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("details", JsonValue(), nullable=False),
        sa.Column("decided_by", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_audit_events_org_project_ts"), ["org", "project", "ts"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_audit_events_request_id"), ["request_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_audit_events_ts"), ["ts"], unique=False)

    op.create_table(
        "capability_records",
        sa.Column("fqdn", sa.String(length=400), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("record_type", sa.String(length=16), server_default="capability", nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=64), nullable=False),
        sa.Column("named", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("namespace", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("tool_name", sa.String(length=160), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("code_hash", sa.String(length=64), nullable=True),
        sa.Column("code_url", sa.Text(), nullable=True),
        sa.Column("intent", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("parameters_schema", JsonValue(), nullable=False),
        sa.Column("tools_used", JsonValue(), nullable=False),
        sa.Column("routing", sa.String(length=8), nullable=False),
        sa.Column("routing_override", sa.String(length=8), nullable=True),
        sa.Column("tags", JsonValue(), nullable=False),
        sa.Column("visibility", sa.String(length=16), server_default="project", nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("version_tag", sa.String(length=64), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("verified", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=True),
        sa.Column("usage_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("success_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("total_latency_ms", sa.Float(), server_default="0", nullable=False),
        sa.Column("last_used_at", UtcDateTime(), nullable=True),
        sa.CheckConstraint(
            "record_type IN ('capability', 'mcp-server')",
            name=op.f("ck_capability_records_record_type"),
        ),
        sa.CheckConstraint(
            "routing IN ('local', 'cloud')", name=op.f("ck_capability_records_routing")
        ),
        sa.CheckConstraint(
            "visibility IN ('private', 'project', 'org', 'public')",
            name=op.f("ck_capability_records_visibility"),
        ),
        sa.PrimaryKeyConstraint("fqdn", name=op.f("pk_capability_records")),
        sa.UniqueConstraint("id", name=op.f("uq_capability_records_id")),
    )
    with op.batch_alter_table("capability_records", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_capability_records_created_by"), ["created_by"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_display_name"), ["display_name"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_namespace"), ["namespace"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_org_project"), ["org", "project"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_org_project_code_hash"),
            ["org", "project", "code_hash"],
            unique=True,
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_org_project_display_name"),
            ["org", "project", "display_name"],
            unique=True,
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_org_project_tool_name"),
            ["org", "project", "tool_name"],
            unique=True,
        )
        batch_op.create_index(
            batch_op.f("ix_capability_records_visibility"), ["visibility"], unique=False
        )

    op.create_table(
        "execution_traces",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("workflow_id", sa.String(length=64), nullable=True),
        sa.Column("parent_id", sa.String(length=36), nullable=True),
        sa.Column("capability_fqdn", sa.String(length=400), nullable=True),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("intent", sa.Text(), nullable=True),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("task_results", JsonValue(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_execution_traces")),
    )
    with op.batch_alter_table("execution_traces", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_execution_traces_capability_fqdn"), ["capability_fqdn"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_execution_traces_org_project_created_at"),
            ["org", "project", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_execution_traces_workflow_id"), ["workflow_id"], unique=False
        )

    op.create_table(
        "permission_grants",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("capability", sa.String(length=32), nullable=False),
        sa.Column("scope", JsonValue(), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=True),
        sa.Column("issued_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=True),
        sa.Column("max_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), server_default="0", nullable=False),
        sa.Column("args_digest", sa.String(length=64), nullable=True),
        sa.Column("policy_version", sa.String(length=64), nullable=False),
        sa.Column("revoked", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("revoked_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_permission_grants")),
    )
    with op.batch_alter_table("permission_grants", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_permission_grants_expires_at"), ["expires_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_permission_grants_org_project_principal"),
            ["org", "project", "principal"],
            unique=False,
        )

    op.create_table(
        "tool_schema",
        sa.Column("server_id", sa.String(length=128), nullable=False),
        sa.Column("tool_name", sa.String(length=256), nullable=False),
        sa.Column("definition", JsonValue(), nullable=False),
        sa.Column("definition_hash", sa.String(length=64), nullable=False),
        sa.Column("pinned_hash", sa.String(length=64), nullable=False),
        sa.Column("flagged", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("first_seen_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("server_id", "tool_name", name=op.f("pk_tool_schema")),
    )
    op.create_table(
        "tool_usage",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("server_id", sa.String(length=128), nullable=False),
        sa.Column("tool_name", sa.String(length=400), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("called_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_usage")),
    )
    with op.batch_alter_table("tool_usage", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tool_usage_org_project_called_at"),
            ["org", "project", "called_at"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_tool_usage_server_id_tool_name"),
            ["server_id", "tool_name"],
            unique=False,
        )

    op.create_table(
        "workflow_state",
        sa.Column("workflow_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("state", JsonValue(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("workflow_id", name=op.f("pk_workflow_state")),
    )
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_workflow_state_expires_at"), ["expires_at"], unique=False
        )

    op.create_table(
        "capability_aliases",
        sa.Column("org", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("tool_name", sa.String(length=160), nullable=False),
        sa.Column("target_fqdn", sa.String(length=400), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_fqdn"],
            ["capability_records.fqdn"],
            name=op.f("fk_capability_aliases_target_fqdn_capability_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org", "project", "alias", name=op.f("pk_capability_aliases")),
    )
    with op.batch_alter_table("capability_aliases", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_capability_aliases_org_project_tool_name"),
            ["org", "project", "tool_name"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_capability_aliases_target_fqdn"), ["target_fqdn"], unique=False
        )

    op.create_table(
        "capability_tags",
        sa.Column("fqdn", sa.String(length=400), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["fqdn"],
            ["capability_records.fqdn"],
            name=op.f("fk_capability_tags_fqdn_capability_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("fqdn", "tag", name=op.f("pk_capability_tags")),
    )
    with op.batch_alter_table("capability_tags", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_capability_tags_tag_fqdn"), ["tag", "fqdn"], unique=False
        )

    op.create_table(
        "capability_versions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("capability_fqdn", sa.String(length=400), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("version_tag", sa.String(length=64), nullable=True),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("code_hash", sa.String(length=64), nullable=True),
        sa.Column("code_url", sa.Text(), nullable=True),
        sa.Column("parameters_schema", JsonValue(), nullable=False),
        sa.Column("tools_used", JsonValue(), nullable=False),
        sa.Column("routing", sa.String(length=8), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("change_summary", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["capability_fqdn"],
            ["capability_records.fqdn"],
            name=op.f("fk_capability_versions_capability_fqdn_capability_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capability_versions")),
        sa.UniqueConstraint(
            "capability_fqdn",
            "version",
            name=op.f("uq_capability_versions_capability_fqdn_version"),
        ),
    )


def downgrade() -> None:
    op.drop_table("capability_versions")
    with op.batch_alter_table("capability_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capability_tags_tag_fqdn"))

    op.drop_table("capability_tags")
    with op.batch_alter_table("capability_aliases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capability_aliases_target_fqdn"))
        batch_op.drop_index(batch_op.f("ix_capability_aliases_org_project_tool_name"))

    op.drop_table("capability_aliases")
    with op.batch_alter_table("workflow_state", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workflow_state_expires_at"))

    op.drop_table("workflow_state")
    with op.batch_alter_table("tool_usage", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tool_usage_server_id_tool_name"))
        batch_op.drop_index(batch_op.f("ix_tool_usage_org_project_called_at"))

    op.drop_table("tool_usage")
    op.drop_table("tool_schema")
    with op.batch_alter_table("permission_grants", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_permission_grants_org_project_principal"))
        batch_op.drop_index(batch_op.f("ix_permission_grants_expires_at"))

    op.drop_table("permission_grants")
    with op.batch_alter_table("execution_traces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_execution_traces_workflow_id"))
        batch_op.drop_index(batch_op.f("ix_execution_traces_org_project_created_at"))
        batch_op.drop_index(batch_op.f("ix_execution_traces_capability_fqdn"))

    op.drop_table("execution_traces")
    with op.batch_alter_table("capability_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capability_records_visibility"))
        batch_op.drop_index(batch_op.f("ix_capability_records_org_project_tool_name"))
        batch_op.drop_index(batch_op.f("ix_capability_records_org_project_display_name"))
        batch_op.drop_index(batch_op.f("ix_capability_records_org_project_code_hash"))
        batch_op.drop_index(batch_op.f("ix_capability_records_org_project"))
        batch_op.drop_index(batch_op.f("ix_capability_records_namespace"))
        batch_op.drop_index(batch_op.f("ix_capability_records_display_name"))
        batch_op.drop_index(batch_op.f("ix_capability_records_created_by"))

    op.drop_table("capability_records")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_ts"))
        batch_op.drop_index(batch_op.f("ix_audit_events_request_id"))
        batch_op.drop_index(batch_op.f("ix_audit_events_org_project_ts"))

    op.drop_table("audit_events")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_org_project"))

    op.drop_table("api_keys")
