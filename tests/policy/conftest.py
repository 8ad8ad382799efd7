"""A gateway under the policy pipeline: in-process servers named like the reference ones
(so the built-in capability map applies), the real sandbox, a real SDK client, and the
default permission rules unless a test sets its own."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import sqlalchemy as sa
from mcp import Client

from gateway.upstreams import Upstream, tool
from pml.config import ScopeSettings, Settings
from pml.gateway.server import Gateway, open_gateway
from pml.registry.scope import Scope
from pml.storage.tables import audit_events, capability_records
from pml.upstream.pool import ClientPool

SCOPE = Scope("acme", "webapp", "erwan")


def policy_upstreams() -> dict[str, Upstream]:
    return {
        "filesystem": Upstream(
            "filesystem",
            [
                tool("read_text_file", "Read a file", path={"type": "string"}),
                tool("list_directory", "List a folder", path={"type": "string"}),
                tool(
                    "write_file",
                    "Write a file",
                    path={"type": "string"},
                    content={"type": "string"},
                ),
            ],
        ),
        "shell": Upstream("shell", [tool("run", "Run a command", command={"type": "string"})]),
        "custom": Upstream("custom", [tool("do", "Does something", what={"type": "string"})]),
        "time": Upstream("time", [tool("get_current_time", "The time now")]),
    }


@dataclass
class PolicyGateway:
    """The gateway, its client, its upstream servers and where its audit goes."""

    gateway: Gateway
    client: Client
    upstreams: dict[str, Upstream]
    audit_file: Path

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        return await self.client.call_tool(name, arguments)

    async def execute(self, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        """``pml_execute``: (isError, its JSON), the JSON checked equal in text and structure."""
        arguments.setdefault("intent", "test run")
        result = await self.client.call_tool("pml_execute", arguments)
        data = result.structured_content
        assert data is not None
        block = result.content[0]
        assert isinstance(block, mcp_types.TextContent)
        assert json.loads(block.text) == data
        return bool(result.is_error), data

    def sent(self, server: str) -> list[str]:
        """The tools ``server`` was really called with, in order."""
        return [name for name, _ in self.upstreams[server].calls]

    async def events(self, *names: str) -> list[dict[str, Any]]:
        """Audit rows (from the table) of these events, oldest first."""
        await self.gateway.policy.audit.flush()
        query = sa.select(audit_events).order_by(audit_events.c.id)
        if names:
            query = query.where(audit_events.c.event.in_(names))
        async with self.gateway.db.read() as conn:
            return [dict(row._mapping) for row in (await conn.execute(query)).all()]  # pyright: ignore[reportPrivateUsage]

    async def decide(
        self, workflow_id: object, decision: str = "once", *, by: str = "ana"
    ) -> dict[str, Any]:
        """A person's decision at the desk (what ``pml approvals approve`` does)."""
        desk = self.gateway.policy.approvals.desk
        return await desk.decide(
            str(workflow_id),
            decision,
            org=SCOPE.org,
            project=SCOPE.project,
            decided_by=f"user:{by}",
            actor=by,
        )

    async def capabilities(self) -> int:
        await self.gateway.executor.flush()
        query = sa.select(sa.func.count()).where(capability_records.c.record_type == "capability")
        async with self.gateway.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())


OpenPolicyGateway = Callable[..., AbstractAsyncContextManager[PolicyGateway]]


@pytest.fixture
def open_policy_gateway(tmp_path: Path) -> OpenPolicyGateway:
    """``async with open_policy_gateway(permissions={...}, policy={...}) as pg:`` on one
    SQLite file per test (a second gateway on the same file sees the same grants)."""

    @asynccontextmanager
    async def opened(
        *, database_url: str | None = None, **sections: Any
    ) -> AsyncIterator[PolicyGateway]:
        upstreams = policy_upstreams()
        pool = ClientPool({name: up.server for name, up in upstreams.items()})
        audit_file = tmp_path / "audit.jsonl"
        data: dict[str, Any] = {
            "database_url": database_url or f"sqlite:///{tmp_path / 'pml.db'}",
            "expose_upstream": True,
            "scope": ScopeSettings(org="acme", project="webapp", user="erwan"),
            "audit": {"file": str(audit_file)},
            "discovery": {"embedder": "hashing"},
            **sections,
        }
        settings = Settings.model_validate(data)
        async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
            yield PolicyGateway(gateway, client, upstreams, audit_file)

    return opened


@pytest.fixture
async def pg(open_policy_gateway: OpenPolicyGateway) -> AsyncGenerator[PolicyGateway]:
    """A gateway with the default policy and permission rules."""
    async with open_policy_gateway() as opened:
        yield opened
