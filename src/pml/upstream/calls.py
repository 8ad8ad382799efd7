r"""One tool call on an open upstream session, its errors translated into ``PmlError``\ s.

    run = await conn.acquire()
    result = await send_call(conn, run, "get_current_time", {"timezone": "UTC"},
                             timeout_s=60, send=typed_call)     # or raw_call (plain JSON)

Every failure names the server and the tool: no answer in time is ``EXECUTION_TIMEOUT``, a
JSON-RPC error ``TOOL_ERROR``, a connection that went away ``UPSTREAM_UNAVAILABLE`` (and the
session is marked lost, to be restarted on a later call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from pml.errors import ExecutionTimeout, InvalidArgs, ToolCallError, UpstreamUnavailable
from pml.telemetry import observe
from pml.upstream.connection import ServerConnection
from pml.upstream.messages import show
from pml.upstream.session import Run

Result = TypeVar("Result")
Send = Callable[[Run, str, dict[str, Any]], Awaitable[Result]]


class _RawResult(BaseModel):
    """A result kept as the server's JSON object (the SDK still checks it against the protocol)."""

    model_config = ConfigDict(extra="allow")


async def typed_call(run: Run, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
    """The SDK's typed result."""
    return await run.client.call_tool(tool, arguments)


async def raw_call(run: Run, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The result as the server's JSON object (no model round trip)."""
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=tool, arguments=arguments)
    )
    result = await run.client.session.send_request(request, _RawResult)
    return dict(result.model_extra or {})


async def send_call(
    conn: ServerConnection,
    run: Run,
    tool: str,
    args: dict[str, Any],
    *,
    timeout_s: float,
    send: Send[Result],
) -> Result:
    """Send one call on ``run`` (acquired from ``conn``) within ``timeout_s``."""
    timeout = timeout_s
    server = conn.name
    try:
        with (
            observe.step("upstream_call", server=server, tool=tool) as step,
            anyio.fail_after(timeout),
        ):
            result = await send(run, tool, args)
            if is_error(result):
                step.outcome = "tool_error"
    except TimeoutError:
        raise ExecutionTimeout(
            f"Upstream tool {server}:{show(tool)} did not answer within {timeout:g} s",
            server=server,
            tool=tool,
            timeout_s=timeout,
        ) from None
    except MCPError as error:
        if error.code == mcp_types.CONNECTION_CLOSED or not run.usable():
            raise _lost(conn, run, tool) from None
        raise ToolCallError(
            f"Upstream server '{server}' refused {server}:{show(tool)}: {error.message}",
            server=server,
            tool=tool,
            upstream_code=error.code,
        ) from None
    except PydanticSerializationError as error:
        raise InvalidArgs(
            f"Arguments for {server}:{show(tool)} are not JSON values: {error}"
        ) from None
    except ValidationError as error:
        raise ToolCallError(
            f"Upstream server '{server}' returned an invalid result for "
            f"{server}:{show(tool)}: {error.error_count()} validation errors",
            server=server,
            tool=tool,
        ) from None
    except (RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
        if not run.usable() or not isinstance(error, RuntimeError):
            raise _lost(conn, run, tool) from None
        raise ToolCallError(
            f"Upstream tool {server}:{show(tool)} failed: {error}",
            server=server,
            tool=tool,
        ) from None
    return result


def is_error(result: object) -> bool:
    """Whether a typed or raw result says ``isError``."""
    if isinstance(result, mcp_types.CallToolResult):
        return result.is_error is True
    return isinstance(result, dict) and cast("dict[str, Any]", result).get("isError") is True


def _lost(conn: ServerConnection, run: Run, tool: str) -> UpstreamUnavailable:
    conn.connection_lost(run, f"the connection closed during a call to {show(tool)}")
    return UpstreamUnavailable(
        f"Upstream server '{conn.name}' went away during {conn.name}:{show(tool)} "
        "(it will be restarted on a later call)",
        server=conn.name,
        tool=tool,
    )
