# pyright: basic
"""Capability tool names that are not valid MCP tool names are shortened (SPEC §3).

Names longer than 64 characters were stored as written; they are rewritten the way new
ones are made (readable head + 8 hex of the full name's SHA-256), on records and aliases.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from pml.registry.names import TOOL_NAME_PATTERN, capability_tool_parts, tool_name_for

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _valid(name: str) -> str:
    if TOOL_NAME_PATTERN.fullmatch(name):
        return name
    parts = capability_tool_parts(name)
    namespace, action = parts if parts is not None else ("code", name)
    return tool_name_for(namespace, action)


def upgrade() -> None:
    conn = op.get_bind()
    for table, key in (("capability_records", "fqdn"), ("capability_aliases", "alias")):
        rows = conn.execute(
            sa.text(
                f"SELECT {key}, org, project, tool_name FROM {table} WHERE length(tool_name) > 64"
            )
        ).all()
        for row in rows:
            conn.execute(
                sa.text(
                    f"UPDATE {table} SET tool_name = :tool WHERE {key} = :key "
                    "AND org = :org AND project = :project"
                ),
                {"tool": _valid(row[3]), "key": row[0], "org": row[1], "project": row[2]},
            )


def downgrade() -> None:
    pass  # the shortened names stay valid under 0004
