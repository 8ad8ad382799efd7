"""A gateway that hands code to PML clients (SPEC §9), and what its tests share.

    async with open_hub(database_url, routing={"local": ["filesystem"]}) as hub:
        handed = await hub.hand_off(READ_NOTE)          # pml_execute as a PML client
        await hub.ingest([trace(handed["workflowId"])])   # the client's trace

The gateway runs two in-process upstream servers (``a`` and ``b``), never ``filesystem``:
that one is on the PML client's machine (``FS`` declares it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types
import sqlalchemy as sa

from gateway.upstreams import Upstream
from pml.config import Settings
from pml.execution.clients import ClientCaller, calling_as
from pml.execution.handoff import CLIENT_RUN_KIND
from pml.gateway.server import Gateway, open_gateway
from pml.registry.models import CapabilityRecord
from pml.registry.scope import Scope
from pml.storage.tables import capability_records, capability_versions, execution_traces
from pml.storage.tables import workflow_state as workflow_states
from pml.upstream.pool import ClientPool

SCOPE = Scope("acme", "webapp", "erwan")
OTHER = Scope("globex", "site", "gina")
FS = ClientCaller(version="t", servers=frozenset({"filesystem"}))
READ_NOTE = 'note = await mcp.filesystem.read_text_file(path="/notes/a.txt")\nreturn note'
READ_INTENT = "read the note file"
WRITE_NOTE = 'await mcp.filesystem.write_file(path="/notes/a.txt", content="x")\nreturn 1'
ECHO = 'return await mcp.a.echo(text="hello")'


def hub_settings(database_url: str, **sections: Any) -> Settings:
    """acme/webapp/erwan, every tool allowed (``*:*``, the policy gate still applies), the
    hashing embedder; ``sections`` are more settings (``routing={...}``)."""
    data: dict[str, Any] = {
        "database_url": database_url,
        "scope": {"org": "acme", "project": "webapp", "user": "erwan"},
        "permissions": {"allow": ["*:*"]},
        "discovery": {"embedder": "hashing"},
        **sections,
    }
    return Settings.model_validate(data)


def trace(workflow_id: str, *, success: bool = True, **fields: Any) -> dict[str, Any]:
    """One trace as ``pml connect`` sends it (``fields`` added or replaced)."""
    sent: dict[str, Any] = {
        "workflowId": workflow_id,
        "success": success,
        "durationMs": 4.5,
        "taskResults": [
            {"tool": "filesystem:read_text_file", "argsDigest": "ab" * 8, "durationMs": 1.5}
        ],
    }
    sent.update(fields)
    return sent


@dataclass
class Hub:
    """An open gateway, its upstream servers, and the client-routed calls of the tests."""

    gateway: Gateway
    upstreams: dict[str, Upstream]

    async def execute(
        self,
        arguments: dict[str, Any],
        *,
        client: ClientCaller | None = FS,
        scope: Scope = SCOPE,
        tool: str = "pml_execute",
    ) -> tuple[bool, dict[str, Any]]:
        """A tool call as ``client`` makes it: (isError, its JSON, the same in text)."""
        with calling_as(client):
            result = await self.gateway.tools.call_tool(scope, tool, arguments)
        data = result.structured_content
        assert data is not None
        block = result.content[0]
        assert isinstance(block, mcp_types.TextContent)
        assert json.loads(block.text) == data
        return bool(result.is_error), data

    async def refused(self, arguments: dict[str, Any], **how: Any) -> dict[str, Any]:
        """The error of a call that must fail."""
        is_error, data = await self.execute(arguments, **how)
        assert is_error, data
        return data["error"]

    async def hand_off(
        self,
        code: str = READ_NOTE,
        *,
        client: ClientCaller | None = FS,
        scope: Scope = SCOPE,
        **arguments: Any,
    ) -> dict[str, Any]:
        """``pml_execute`` of ``code`` by ``client``, which must be handed back."""
        arguments.setdefault("intent", READ_INTENT)
        is_error, data = await self.execute({"code": code, **arguments}, client=client, scope=scope)
        assert not is_error, data
        assert data["status"] == "execute_locally", data
        return data

    async def ingest(
        self, traces: list[Any], *, client: ClientCaller | None = FS, scope: Scope = SCOPE
    ) -> list[dict[str, Any]]:
        return await self.gateway.traces.ingest(scope, traces, client)

    async def state(self, workflow_id: str, scope: Scope = SCOPE) -> dict[str, Any] | None:
        """The live learning context of a hand-off, as the workflow store gives it."""
        store = self.gateway.policy.workflows
        return await store.get(workflow_id, kind=CLIENT_RUN_KIND, scope=scope)

    async def record(self, ref: str, scope: Scope = SCOPE) -> CapabilityRecord:
        """A capability's record once the queued usage counts are written."""
        await self.gateway.executor.flush()
        return (await self.gateway.registry.resolve(scope, ref)).record

    async def counts(self) -> dict[str, int]:
        """Capabilities, their versions, trace rows and workflow states stored."""
        await self.gateway.executor.flush()
        capabilities = sa.select(capability_records.c.fqdn).where(
            capability_records.c.record_type == "capability"
        )
        queries = {
            "capabilities": sa.select(sa.func.count()).select_from(capabilities.subquery()),
            "versions": sa.select(sa.func.count()).where(
                capability_versions.c.capability_fqdn.in_(capabilities)
            ),
            "traces": sa.select(sa.func.count()).select_from(execution_traces),
            "states": sa.select(sa.func.count()).select_from(workflow_states),
        }
        async with self.gateway.db.read() as conn:
            return {
                name: int((await conn.execute(query)).scalar_one())
                for name, query in queries.items()
            }

    async def trace_rows(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """The ``execution_traces`` rows (of one workflow), oldest first."""
        await self.gateway.executor.flush()
        query = sa.select(execution_traces).order_by(execution_traces.c.created_at)
        if workflow_id is not None:
            query = query.where(execution_traces.c.workflow_id == workflow_id)
        async with self.gateway.db.read() as conn:
            return [dict(row) for row in (await conn.execute(query)).mappings()]

    def sent(self) -> list[tuple[str, str]]:
        """Every ``(server, tool)`` the gateway's own upstream servers were called with."""
        return [(name, tool) for name, up in self.upstreams.items() for tool, _ in up.calls]


@asynccontextmanager
async def open_hub(database_url: str, **sections: Any) -> AsyncIterator[Hub]:
    """A gateway on ``database_url`` with servers ``a`` and ``b`` (``sections``: settings)."""
    upstreams = {"a": Upstream("a"), "b": Upstream("b")}
    pool = ClientPool({name: upstream.server for name, upstream in upstreams.items()})
    async with open_gateway(hub_settings(database_url, **sections), pool=pool) as gateway:
        yield Hub(gateway, upstreams)
