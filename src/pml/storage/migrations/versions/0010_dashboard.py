# pyright: basic
"""The dashboard: people's sign-in sessions, tool usage rolled up per day (backfilled),
the pinned definition of each upstream tool (so a changed one can be shown as a diff and
accepted), and audit columns the dashboard filters on (the tool and the capability FQDN an
event is about), indexed per org/project.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

LATENCY_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
AUDIT_INDEXES = ("event", "actor", "tool", "capability", "decided_by")


def upgrade() -> None:
    _usage_daily()
    op.create_index(
        "ix_tool_usage_org_project_server_id_tool_name",
        "tool_usage",
        ["org", "project", "server_id", "tool_name"],
    )
    op.create_table(
        "dashboard_sessions",
        # SHA-256 of the session token: the cookie's value is never stored
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(36), nullable=True),  # NULL: `pml dashboard`'s own
        sa.Column("org", sa.String(64), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
    )
    op.create_index("ix_dashboard_sessions_expires_at", "dashboard_sessions", ["expires_at"])
    with op.batch_alter_table("tool_schema", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pinned_definition", JsonValue(), nullable=True))
    # Until now only the pinned hash was kept: a tool that is not flagged is pinned as it is.
    op.execute(
        "UPDATE tool_schema SET pinned_definition = definition WHERE definition_hash = pinned_hash"
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tool", sa.String(400), nullable=True))
        batch_op.add_column(sa.Column("capability", sa.String(400), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(
            "UPDATE audit_events SET tool = left(details->>'tool', 400), "
            "capability = left(coalesce(details->>'fqdn', details->>'capabilityFqdn', "
            "CASE WHEN details->>'capability' LIKE '%.%.%.%.%' "
            "THEN details->>'capability' END), 400)"
        )
    else:
        op.execute(
            "UPDATE audit_events SET tool = substr(json_extract(details, '$.tool'), 1, 400), "
            "capability = substr(coalesce(json_extract(details, '$.fqdn'), "
            "json_extract(details, '$.capabilityFqdn'), "
            "CASE WHEN json_extract(details, '$.capability') LIKE '%.%.%.%.%' "
            "THEN json_extract(details, '$.capability') END), 1, 400)"
        )
    for column in AUDIT_INDEXES:
        op.create_index(
            f"ix_audit_events_org_project_{column}_id",
            "audit_events",
            ["org", "project", column, "id"],
        )


def _usage_daily() -> None:
    buckets = [f"lat_le_{bound}" for bound in LATENCY_BOUNDS_MS] + ["lat_over"]
    op.create_table(
        "tool_usage_daily",
        sa.Column("org", sa.String(64), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("server_id", sa.String(128), nullable=False),
        sa.Column("tool_name", sa.String(400), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("latency_sum_ms", sa.Float(), nullable=False),
        sa.Column("latency_max_ms", sa.Float(), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False, server_default="0") for name in buckets),
        sa.PrimaryKeyConstraint(
            "org", "project", "day", "server_id", "tool_name", name=op.f("pk_tool_usage_daily")
        ),
    )
    op.create_index(
        "ix_tool_usage_daily_org_project_server_id_tool_name_day",
        "tool_usage_daily",
        ["org", "project", "server_id", "tool_name", "day"],
    )
    if op.get_bind().dialect.name == "postgresql":
        day = "to_char(called_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
    else:
        day = "date(called_at)"
    lower = "0"
    counts: list[str] = []
    for bound in LATENCY_BOUNDS_MS:
        counts.append(
            f"sum(CASE WHEN latency_ms > {lower} AND latency_ms <= {bound} THEN 1 ELSE 0 END)"
            if lower != "0"
            else f"sum(CASE WHEN latency_ms <= {bound} THEN 1 ELSE 0 END)"
        )
        lower = str(bound)
    counts.append(f"sum(CASE WHEN latency_ms > {lower} THEN 1 ELSE 0 END)")
    op.execute(
        "INSERT INTO tool_usage_daily (org, project, day, server_id, tool_name, calls, errors, "
        f"latency_sum_ms, latency_max_ms, {', '.join(buckets)}) "
        f"SELECT org, project, {day}, server_id, tool_name, count(*), "
        "sum(CASE WHEN success THEN 0 ELSE 1 END), sum(latency_ms), max(latency_ms), "
        f"{', '.join(counts)} FROM tool_usage GROUP BY org, project, {day}, server_id, tool_name"
    )


def downgrade() -> None:
    op.drop_index("ix_tool_usage_org_project_server_id_tool_name", table_name="tool_usage")
    op.drop_index(
        "ix_tool_usage_daily_org_project_server_id_tool_name_day", table_name="tool_usage_daily"
    )
    op.drop_table("tool_usage_daily")
    for column in AUDIT_INDEXES:
        op.drop_index(f"ix_audit_events_org_project_{column}_id", table_name="audit_events")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_column("capability")
        batch_op.drop_column("tool")
    with op.batch_alter_table("tool_schema", schema=None) as batch_op:
        batch_op.drop_column("pinned_definition")
    op.drop_index("ix_dashboard_sessions_expires_at", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
