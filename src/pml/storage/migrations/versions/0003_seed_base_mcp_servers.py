# pyright: basic
"""Seed the base MCP server records: mcp:filesystem, mcp:shell, mcp:sqlite (public, pml.std).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from pml.storage.types import JsonValue, UtcDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ORG, PROJECT, AUTHOR = "pml", "std", "pml"
SEEDS = (
    (
        "filesystem",
        "npx -y @modelcontextprotocol/server-filesystem",
        "Read, write and search files on the local machine (MCP reference server).",
    ),
    ("shell", "uvx mcp-shell-server", "Run shell commands on the local machine."),
    ("sqlite", "uvx mcp-server-sqlite", "Query and change a local SQLite database."),
)

records = sa.table(
    "capability_records",
    *(
        sa.column(name)
        for name in [
            "fqdn",
            "id",
            "record_type",
            "org",
            "project",
            "display_name",
            "named",
            "namespace",
            "action",
            "tool_name",
            "hash",
            "code_url",
            "description",
            "routing",
            "visibility",
            "version",
            "created_by",
            "updated_by",
            "verified",
        ]
    ),
    sa.column("parameters_schema", JsonValue()),
    sa.column("tools_used", JsonValue()),
    sa.column("tags", JsonValue()),
    sa.column("created_at", UtcDateTime()),
    sa.column("updated_at", UtcDateTime()),
)
versions = sa.table(
    "capability_versions",
    *(
        sa.column(name)
        for name in [
            "capability_fqdn",
            "version",
            "code_url",
            "routing",
            "updated_by",
            "change_summary",
        ]
    ),
    sa.column("parameters_schema", JsonValue()),
    sa.column("tools_used", JsonValue()),
    sa.column("updated_at", UtcDateTime()),
)

tags = sa.table("capability_tags", sa.column("fqdn"), sa.column("tag"))


def _fqdn(name: str, code_url: str) -> str:
    digest = hashlib.sha256(f"{name}\0{code_url}".encode()).hexdigest()
    return f"{ORG}.{PROJECT}.mcp.{name}.{digest[:4]}"


def upgrade() -> None:
    now = datetime.now(UTC)
    empty_schema = {"type": "object", "properties": {}}
    for name, code_url, description in SEEDS:
        fqdn = _fqdn(name, code_url)
        op.execute(
            records.insert().values(
                fqdn=fqdn,
                id=str(uuid.uuid4()),
                record_type="mcp-server",
                org=ORG,
                project=PROJECT,
                display_name=f"mcp:{name}",
                named=True,
                namespace="mcp",
                action=name,
                tool_name=f"mcp__mcp__{name}",
                hash=fqdn.rsplit(".", 1)[1],
                code_url=code_url,
                description=description,
                routing="local",
                visibility="public",
                version=1,
                created_by=AUTHOR,
                updated_by=AUTHOR,
                verified=True,
                parameters_schema=empty_schema,
                tools_used=[],
                tags=["mcp-server"],
                created_at=now,
                updated_at=now,
            )
        )
        op.execute(tags.insert().values(fqdn=fqdn, tag="mcp-server"))
        op.execute(
            versions.insert().values(
                capability_fqdn=fqdn,
                version=1,
                code_url=code_url,
                routing="local",
                updated_by=AUTHOR,
                change_summary="seeded base MCP server",
                parameters_schema=empty_schema,
                tools_used=[],
                updated_at=now,
            )
        )


def downgrade() -> None:
    fqdns = [_fqdn(name, code_url) for name, code_url, _ in SEEDS]
    op.execute(tags.delete().where(tags.c.fqdn.in_(fqdns)))
    op.execute(versions.delete().where(versions.c.capability_fqdn.in_(fqdns)))
    op.execute(records.delete().where(records.c.fqdn.in_(fqdns)))
