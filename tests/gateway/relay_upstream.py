"""An in-process upstream server that asks its client things, for the relay tests.

    asker = Asker()
    pool = ClientPool({"asker": asker.server})

    async with relay_gateway(sqlite_url, asker, approval_wait_s=1) as gateway: ...

Tools: ``slow`` (``steps`` progress notifications, then waits for ``release`` unless
``wait`` is false; records a cancellation), ``sample`` / ``elicit`` / ``roots`` (ask the
client, answer what it said, or the error it got). Spoken to in 2026-07-28 (the pool's
in-process client) the questions are ``input_required`` rounds; in 2025-11-25 they are
requests in the middle of the call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.config import PermissionsSettings, ScopeSettings, Settings
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool

Ctx = ServerRequestContext[Any, Any]
Question = mcp_types.CreateMessageRequest | mcp_types.ElicitRequest | mcp_types.ListRootsRequest


def _tool(name: str, **properties: Any) -> mcp_types.Tool:
    return mcp_types.Tool(name=name, input_schema={"type": "object", "properties": properties})


TOOLS = [
    _tool("slow", steps={"type": "integer"}, wait={"type": "boolean"}),
    _tool("sample", prompt={"type": "string"}),
    _tool("elicit", message={"type": "string"}),
    _tool("roots"),
]


def _text(value: Any, *, error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=json.dumps(value))], is_error=error
    )


class Asker:
    """See the module docstring."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = anyio.Event()
        self.asked: list[str] = []
        self.server: Server[Any] = Server(
            "asker", on_list_tools=self._list, on_call_tool=self._call
        )

    async def _list(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=TOOLS)

    async def _call(
        self, ctx: Ctx, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        args = params.arguments or {}
        if params.name == "slow":
            return await self._slow(ctx, int(args.get("steps", 3)), bool(args.get("wait", False)))
        try:
            return await self._ask(ctx, params, args)
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise

    async def _ask(
        self, ctx: Ctx, params: mcp_types.CallToolRequestParams, args: dict[str, Any]
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        question: Question
        if params.name == "sample":
            message = mcp_types.SamplingMessage(
                role="user",
                content=mcp_types.TextContent(type="text", text=str(args.get("prompt", "hi"))),
            )
            question = mcp_types.CreateMessageRequest(
                params=mcp_types.CreateMessageRequestParams(messages=[message], max_tokens=50)
            )
        elif params.name == "elicit":
            question = mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(
                    message=str(args.get("message", "Your name?")),
                    requested_schema={
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                    },
                )
            )
        else:
            question = mcp_types.ListRootsRequest()
        self.asked.append(question.method)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            answer = (params.input_responses or {}).get("q")
            if answer is None:
                return mcp_types.InputRequiredResult(input_requests={"q": question})
            return _text(answer.model_dump(mode="json", by_alias=True, exclude_none=True))
        try:
            result = await ctx.session.send_request(
                question, _answer_type(question), metadata=_related(ctx)
            )
        except MCPError as error:
            return _text({"error": error.message, "code": error.code}, error=True)
        return _text(result.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def _slow(self, ctx: Ctx, steps: int, wait: bool) -> mcp_types.CallToolResult:
        try:
            for step in range(1, steps + 1):
                await ctx.session.report_progress(step, steps, f"step {step}")
            self.started.set()
            if wait:
                await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        return _text({"done": steps})


@asynccontextmanager
async def relay_gateway(
    database_url: str, asker: Asker, **permissions: Any
) -> AsyncGenerator[Gateway]:
    """A gateway passing ``asker``'s tools through as ``asker__*`` (every tool allowed)."""
    settings = Settings(
        database_url=database_url,
        expose_upstream=True,
        scope=ScopeSettings(org="acme", project="webapp", user="erwan"),
        permissions=PermissionsSettings(allow=["*:*"], **permissions),
    )
    async with open_gateway(settings, pool=ClientPool({"asker": asker.server})) as gateway:
        yield gateway


def _answer_type(question: Question) -> type[Any]:
    if isinstance(question, mcp_types.CreateMessageRequest):
        return mcp_types.CreateMessageResult
    if isinstance(question, mcp_types.ElicitRequest):
        return mcp_types.ElicitResult
    return mcp_types.ListRootsResult


def _related(ctx: Ctx) -> Any:
    from mcp.shared.message import ServerMessageMetadata

    return ServerMessageMetadata(related_request_id=ctx.request_id)
