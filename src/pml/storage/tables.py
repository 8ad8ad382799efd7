"""The schema of PML, as SQLAlchemy Core tables shared by SQLite and PostgreSQL.

Migrations under ``storage/migrations`` create exactly these tables; a test compares the
migrated database with this metadata, so the two cannot drift apart.

    capability_records (+ _aliases, _versions, _version_tags, _tags)   the registry: one
        row per capability or MCP server (FQDN key); history is append-only (triggers)
    tool_schema, tool_usage, tool_usage_daily   the upstream catalog and every tool call
    execution_traces, workflow_state   snippet runs; short-lived state (handoffs, approvals)
    audit_events, permission_grants, api_keys, dashboard_sessions   who may do what, and did
    upstream_servers, discovery_vectors, curation_runs   reported states, embeddings, names
    deployment_state   small facts a deployment remembers between starts
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from pml.storage.types import JsonValue, UtcDateTime

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

NAME = sa.String(64)
SCOPE_PART = sa.String(64)

# Names, tool names and code are unique among the active records of a scope only.
ACTIVE_ONLY: dict[str, Any] = {
    f"{name}_where": sa.text("archived_at IS NULL") for name in ("sqlite", "postgresql")
}

capability_records = sa.Table(
    "capability_records",
    metadata,
    sa.Column("fqdn", sa.String(400), primary_key=True),
    sa.Column("id", sa.String(36), nullable=False, unique=True),
    sa.Column("record_type", sa.String(16), nullable=False, server_default="capability"),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("display_name", NAME, nullable=False),
    sa.Column("named", sa.Boolean(), nullable=False, server_default=sa.false()),
    # namespace/action/tool_name follow the display name; the FQDN keeps its creation parts.
    sa.Column("namespace", NAME, nullable=False),
    sa.Column("action", NAME, nullable=False),
    sa.Column("tool_name", sa.String(160), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("code", sa.Text(), nullable=True),
    sa.Column("code_hash", sa.String(64), nullable=True),
    sa.Column("code_url", sa.Text(), nullable=True),
    sa.Column("intent", sa.Text(), nullable=True),
    sa.Column("description", sa.Text(), nullable=True),
    sa.Column("parameters_schema", JsonValue(), nullable=False),
    sa.Column("tools_used", JsonValue(), nullable=False),
    sa.Column("routing", sa.String(8), nullable=False),
    sa.Column("routing_override", sa.String(8), nullable=True),
    sa.Column("tags", JsonValue(), nullable=False),
    sa.Column("visibility", sa.String(16), nullable=False, server_default="project"),
    sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
    sa.Column("version_tag", sa.String(64), nullable=True),
    sa.Column("created_by", sa.String(128), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("updated_by", sa.String(128), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("verified", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("signature", sa.Text(), nullable=True),
    sa.Column("usage_count", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("success_count", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("total_latency_ms", sa.Float(), nullable=False, server_default="0"),
    sa.Column("last_used_at", UtcDateTime(), nullable=True),
    # the last runs: a bit each (newest lowest), how many count (<= 10), their mean latency
    sa.Column("recent_outcomes", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("recent_runs", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("recent_latency_ms", sa.Float(), nullable=False, server_default="0"),
    # An archived record keeps its FQDN and history, frees its names (its aliases wait here)
    sa.Column("archived_at", UtcDateTime(), nullable=True),
    sa.Column("archived_by", sa.String(128), nullable=True),
    sa.Column("archived_aliases", JsonValue(), nullable=True),
    sa.Column("deprecated_at", UtcDateTime(), nullable=True),
    sa.Column("deprecated_by", sa.String(128), nullable=True),
    sa.Column("deprecation_message", sa.Text(), nullable=True),
    sa.Column("replaced_by", sa.String(400), nullable=True),  # the replacement's FQDN
    sa.CheckConstraint("record_type IN ('capability', 'mcp-server')", name="record_type"),
    sa.CheckConstraint("visibility IN ('private', 'project', 'org', 'public')", name="visibility"),
    sa.CheckConstraint("routing IN ('local', 'cloud')", name="routing"),
    sa.Index(None, "org", "project"),
    sa.Index(None, "org", "project", "display_name", unique=True, **ACTIVE_ONLY),
    sa.Index(None, "org", "project", "tool_name", unique=True, **ACTIVE_ONLY),
    sa.Index(None, "org", "project", "code_hash", unique=True, **ACTIVE_ONLY),
    sa.Index(None, "display_name"),
    sa.Index(None, "namespace"),
    sa.Index(None, "created_by"),
    sa.Index(None, "visibility"),
    sa.Index(None, "updated_at"),
)

capability_aliases = sa.Table(
    "capability_aliases",
    metadata,
    sa.Column("org", SCOPE_PART, primary_key=True),
    sa.Column("project", SCOPE_PART, primary_key=True),
    sa.Column("alias", NAME, primary_key=True),
    sa.Column("tool_name", sa.String(160), nullable=False),
    sa.Column(
        "target_fqdn",
        sa.String(400),
        sa.ForeignKey("capability_records.fqdn", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index(None, "target_fqdn"),
    sa.Index(None, "org", "project", "tool_name"),
)

capability_versions = sa.Table(
    "capability_versions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column(
        "capability_fqdn",
        sa.String(400),
        sa.ForeignKey("capability_records.fqdn", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("version_tag", sa.String(64), nullable=True),
    sa.Column("code", sa.Text(), nullable=True),
    sa.Column("code_hash", sa.String(64), nullable=True),
    sa.Column("code_url", sa.Text(), nullable=True),
    sa.Column("parameters_schema", JsonValue(), nullable=False),
    sa.Column("tools_used", JsonValue(), nullable=False),
    sa.Column("routing", sa.String(8), nullable=False),
    sa.Column("updated_by", sa.String(128), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
    sa.Column("change_summary", sa.Text(), nullable=True),
    sa.UniqueConstraint("capability_fqdn", "version"),
)

capability_version_tags = sa.Table(
    "capability_version_tags",
    metadata,
    sa.Column(
        "capability_fqdn",
        sa.String(400),
        sa.ForeignKey("capability_records.fqdn", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tag", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("created_by", sa.String(128), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.UniqueConstraint("capability_fqdn", "version"),
)

capability_tags = sa.Table(
    "capability_tags",
    metadata,
    sa.Column(
        "fqdn",
        sa.String(400),
        sa.ForeignKey("capability_records.fqdn", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tag", NAME, primary_key=True),
    sa.Index(None, "tag", "fqdn"),
)

tool_schema = sa.Table(
    "tool_schema",
    metadata,
    sa.Column("server_id", sa.String(128), primary_key=True),
    sa.Column("tool_name", sa.String(256), primary_key=True),
    sa.Column("definition", JsonValue(), nullable=False),
    sa.Column("definition_hash", sa.String(64), nullable=False),
    sa.Column("pinned_hash", sa.String(64), nullable=False),
    # The definition a person accepted (first seen, or accepted on the dashboard).
    sa.Column("pinned_definition", JsonValue(), nullable=True),
    sa.Column("flagged", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("first_seen_at", UtcDateTime(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)

tool_usage = sa.Table(
    "tool_usage",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("server_id", sa.String(128), nullable=False),
    sa.Column("tool_name", sa.String(400), nullable=False),
    sa.Column("latency_ms", sa.Float(), nullable=False),
    sa.Column("success", sa.Boolean(), nullable=False),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=True),
    sa.Column("called_at", UtcDateTime(), nullable=False),
    sa.Index(None, "server_id", "tool_name"),
    sa.Index(None, "org", "project", "called_at"),
    # one tool's (or capability's) calls in a tenant: cap_whois, the dashboard
    sa.Index(None, "org", "project", "server_id", "tool_name"),
)

# Upper bounds (ms) of the daily latency buckets (``lat_over``: slower); "at most <bound> ms"
LATENCY_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
LATENCY_BUCKETS = (*(f"lat_le_{bound}" for bound in LATENCY_BOUNDS_MS), "lat_over")

# ``tool_usage`` per UTC day and tool, kept in step by every insert (the dashboard's charts)
tool_usage_daily = sa.Table(
    "tool_usage_daily",
    metadata,
    sa.Column("org", SCOPE_PART, primary_key=True),
    sa.Column("project", SCOPE_PART, primary_key=True),
    sa.Column("day", sa.String(10), primary_key=True),  # YYYY-MM-DD, UTC
    sa.Column("server_id", sa.String(128), primary_key=True),
    sa.Column("tool_name", sa.String(400), primary_key=True),
    sa.Column("calls", sa.Integer(), nullable=False),
    sa.Column("errors", sa.Integer(), nullable=False),
    sa.Column("latency_sum_ms", sa.Float(), nullable=False),
    sa.Column("latency_max_ms", sa.Float(), nullable=False),
    *(
        sa.Column(name, sa.Integer(), nullable=False, server_default="0")
        for name in LATENCY_BUCKETS
    ),
    sa.Index(None, "org", "project", "server_id", "tool_name", "day"),
)

execution_traces = sa.Table(
    "execution_traces",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workflow_id", sa.String(64), nullable=True),
    sa.Column("parent_id", sa.String(36), nullable=True),
    sa.Column("capability_fqdn", sa.String(400), nullable=True),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=True),
    sa.Column("intent", sa.Text(), nullable=True),
    sa.Column("success", sa.Boolean(), nullable=False),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("duration_ms", sa.Float(), nullable=False),
    sa.Column("task_results", JsonValue(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index(None, "workflow_id"),
    sa.Index(None, "capability_fqdn"),
    sa.Index(None, "org", "project", "created_at"),
)

workflow_state = sa.Table(
    "workflow_state",
    metadata,
    sa.Column("workflow_id", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=True),
    sa.Column("state", JsonValue(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
    sa.Column("claimed_at", UtcDateTime(), nullable=True),  # by a trace ingest (its lease)
    sa.Column("decision", sa.String(16), nullable=True),  # NULL pending, approved / denied
    sa.Index(None, "expires_at"),
    sa.Index(None, "org", "project", "user_id", "kind", "expires_at"),  # [limits] quota
)

audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("ts", UtcDateTime(), nullable=False),
    sa.Column("event", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(128), nullable=True),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("request_id", sa.String(64), nullable=True),
    sa.Column("details", JsonValue(), nullable=False),
    sa.Column("decided_by", sa.String(200), nullable=True),
    # What the event is about, taken from its details when written (the dashboard filters).
    sa.Column("tool", sa.String(400), nullable=True),  # "server:tool"
    sa.Column("capability", sa.String(400), nullable=True),  # a capability's FQDN
    sa.Index(None, "ts"),
    sa.Index(None, "org", "project", "ts"),
    sa.Index(None, "org", "project", "id"),
    sa.Index(None, "request_id"),
    sa.Index(None, "org", "project", "event", "id"),
    sa.Index(None, "org", "project", "actor", "id"),
    sa.Index(None, "org", "project", "tool", "id"),
    sa.Index(None, "org", "project", "capability", "id"),
    sa.Index(None, "org", "project", "decided_by", "id"),
)

permission_grants = sa.Table(
    "permission_grants",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("principal", sa.String(128), nullable=False),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("capability", sa.String(32), nullable=False),
    sa.Column("scope", JsonValue(), nullable=False),
    sa.Column("purpose", sa.Text(), nullable=True),
    sa.Column("issued_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=True),
    sa.Column("max_uses", sa.Integer(), nullable=True),
    sa.Column("uses", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("args_digest", sa.String(64), nullable=True),
    sa.Column("policy_version", sa.String(64), nullable=False),
    sa.Column("revoked", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    sa.Index(None, "org", "project", "principal"),
    sa.Index(None, "expires_at"),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("prefix", sa.String(16), nullable=False),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=True),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("revoked_at", UtcDateTime(), nullable=True),
    sa.Column("last_used_at", UtcDateTime(), nullable=True),
    # "agent" (MCP, its own audit events) or "admin" (+ approvals, the org's audit, dashboard)
    sa.Column("role", sa.String(16), nullable=False, server_default="agent"),
    sa.Index(None, "org", "project"),
)

upstream_servers = sa.Table(
    "upstream_servers",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("transport", sa.String(8), nullable=False),
    sa.Column("tool_count", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_latency_ms", sa.Float(), nullable=True),
    sa.Column("last_error", sa.Text(), nullable=True),
    sa.Column("flagged_tools", JsonValue(), nullable=False),
    sa.Column("reported_by", sa.String(128), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)

discovery_vectors = sa.Table(
    "discovery_vectors",
    metadata,
    # "tool:<server>:<tool>", "capability:<fqdn>", or "text:<hash>" (an extra text's vector)
    sa.Column("item_key", sa.String(600), primary_key=True),
    sa.Column("model", sa.String(128), nullable=False),  # the embedder (changed: re-embed)
    # SHA-256 of the embedded text (a changed text re-embeds)
    sa.Column("text_hash", sa.String(64), nullable=False),
    sa.Column("vector", sa.LargeBinary(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)

curation_runs = sa.Table(
    "curation_runs",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    # "manual" (cap_curate, pml cap curate) or "auto" (after N new unnamed capabilities)
    sa.Column("trigger", sa.String(16), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("suggestions", JsonValue(), nullable=False),
    sa.Column("applied", JsonValue(), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Index(None, "org", "project", "created_at"),
)

dashboard_sessions = sa.Table(
    "dashboard_sessions",
    metadata,
    # SHA-256 of the session token: the cookie's value is never stored
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("key_id", sa.String(36), nullable=True),  # NULL: `pml dashboard`'s own sign-in
    sa.Column("org", SCOPE_PART, nullable=False),
    sa.Column("project", SCOPE_PART, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", UtcDateTime(), nullable=False),
    sa.Column("expires_at", UtcDateTime(), nullable=False),
    sa.Index(None, "expires_at"),
)

# Small facts a deployment remembers between starts (e.g. the [routing] fingerprint).
deployment_state = sa.Table(
    "deployment_state",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text(), nullable=False),
    sa.Column("updated_at", UtcDateTime(), nullable=False),
)
