"""Sample data and small helpers shared by several test modules.

``from samples import ...`` works because pytest's default ``prepend`` import mode puts
``tests/`` (the folder of the root ``conftest.py``) on ``sys.path``; pyright finds it through
``extraPaths`` in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityDraft, CapabilityRegistry

# -- MCP client configs (mcpServers files as Claude Desktop, Claude Code and Cursor write them) --

CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"},
        },
        "time": {"command": "uvx", "args": ["mcp-server-time"], "autoApprove": ["get_time"]},
    },
    "globalShortcut": "Ctrl+Space",
}

CLAUDE_CODE = {
    "mcpServers": {
        "git": {
            "type": "stdio",
            "command": "uvx",
            "args": ["mcp-server-git", "--repository", "."],
            "env": {},
        },
        "sentry": {
            "type": "http",
            "url": "https://mcp.sentry.dev/mcp",
            "headers": {"Authorization": "Bearer ${SENTRY_TOKEN}"},
        },
        "legacy": {"type": "sse", "url": "https://example.com/sse"},
    }
}

CURSOR = {
    "mcpServers": {
        "memory": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-memory"],
            "env": {"MEMORY_FILE_PATH": "/tmp/memory.json"},
            "alwaysAllow": ["read_graph"],
            "autoApprove": [],
            "timeout": 60,
        },
        "remote": {"url": "https://example.com/mcp", "headers": {"X-Api-Key": "k"}, "timeout": 30},
    }
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path, value: object) -> Path:
    return write(path, json.dumps(value))


# -- capabilities ---------------------------------------------------------------------------


async def make(
    registry: CapabilityRegistry,
    scope: Scope,
    code: str,
    *,
    name: str | None = None,
    tools_used: Sequence[str] = (),
    tags: Sequence[str] = (),
    visibility: Visibility = "project",
    description: str | None = None,
) -> CapabilityRecord:
    """Capture ``code`` as a new capability (failing the test if it already existed)."""
    draft = CapabilityDraft(
        code=code,
        intent=f"intent of {code}",
        tools_used=list(tools_used),
        name=name,
        tags=list(tags),
        visibility=visibility,
        description=description,
    )
    result = await registry.capture(scope, draft, latency_ms=5.0)
    assert result.created
    return result.record


def early_record(code: str, intent: str = "a dozen") -> dict[str, object]:
    """A ``capability_records`` row with only the columns every revision since 0002 has:
    what an older gateway wrote, for migration tests."""
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    digest = hashlib.sha256(code.encode()).hexdigest()
    return {
        "fqdn": f"acme.webapp.code.exec_{digest[:8]}.{digest[:4]}",
        "id": f"00000000-0000-0000-0000-{digest[:12]}",
        "record_type": "capability",
        "org": "acme",
        "project": "webapp",
        "display_name": f"unnamed_{digest[:8]}",
        "named": False,
        "namespace": "code",
        "action": f"exec_{digest[:8]}",
        "tool_name": f"mcp__code__exec_{digest[:8]}",
        "hash": digest[:4],
        "code": code,
        "code_hash": digest,
        "intent": intent,
        "parameters_schema": {"type": "object"},
        "tools_used": [],
        "routing": "local",
        "tags": [],
        "created_by": "erwan",
        "created_at": now,
        "updated_by": "erwan",
        "updated_at": now,
        "usage_count": 1,
    }


@contextmanager
def statements_sent(engine: sa.Engine) -> Iterator[list[str]]:
    """The SQL text of every statement ``engine`` sends while the block runs."""
    sent: list[str] = []

    def record(*event_args: object) -> None:
        sent.append(str(event_args[2]))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def database_text(url: str) -> str:
    """Every value of every table of a SQLite file, as text (after the WAL is merged)."""
    path = Path(sa.make_url(url).database or "")
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = [
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        parts: list[str] = []
        for table in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"'):
                parts.extend(
                    value.decode("latin-1") if isinstance(value, bytes) else str(value)
                    for value in row
                )
        return "\n".join(parts)
    finally:
        connection.close()
