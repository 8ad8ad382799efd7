r"""One tool call on an open upstream session, its errors translated into ``PmlError``\ s.

    run = await conn.acquire()
    result = await send_call(conn, run, "get_current_time", {"timezone": "UTC"},
                             timeout_s=60, send=typed_call)     # or raw_call (plain JSON)

Every failure names the server and the tool: no answer in time is ``EXECUTION_TIMEOUT``, a
JSON-RPC error ``TOOL_ERROR``, a connection that went away ``UPSTREAM_UNAVAILABLE`` (and the
session is marked lost, to be restarted on a later call).

A call knows the client request it is made for through ``REQUESTER`` (a context variable the
gateway sets around each client request, so it follows a ``pml_execute`` run into the
sandbox's tool calls): the upstream's progress notifications go to ``Requester.progress``,
and while the call is in flight ``requesters_on(session)`` names it to the relay that
answers the upstream's sampling/elicitation/roots requests. Cancelling the awaiting task
(a client's ``notifications/cancelled``, a timeout) makes the SDK send
``notifications/cancelled`` upstream.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, cast

import anyio
import mcp_types
from mcp.client._input_required import run_input_required_driver
from mcp.client.session import ClientRequestContext, ClientSession
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


class Requester(Protocol):
    """The client request an upstream call is made for (see the module docstring)."""

    @property
    def wants_progress(self) -> bool:
        """Whether the client asked for progress (a ``progressToken``)."""
        ...

    def progress_of(self, server: str, tool: str) -> ProgressFnT:
        """Where the progress of one upstream call of ``server:tool`` goes."""
        ...


class ProgressFnT(Protocol):
    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """One ``notifications/progress`` of the upstream call."""
        ...


REQUESTER: ContextVar[Requester | None] = ContextVar("pml_requester", default=None)
# The calls in flight on each upstream session, oldest first (None: made for no known client,
# e.g. answered by the stdio fast lane). Keyed by the SDK session the relay's callbacks see.
_IN_FLIGHT: weakref.WeakKeyDictionary[ClientSession, list[Requester | None]] = (
    weakref.WeakKeyDictionary()
)


@contextmanager
def requesting(requester: Requester | None) -> Generator[None]:
    """Make the upstream calls inside the block on behalf of ``requester``."""
    token = REQUESTER.set(requester)
    try:
        yield
    finally:
        REQUESTER.reset(token)


def requesters_on(session: ClientSession) -> list[Requester | None]:
    """Who the calls in flight on ``session`` are for, oldest first."""
    return list(_IN_FLIGHT.get(session, ()))


@contextmanager
def _in_flight(run: Run, requester: Requester | None) -> Generator[None]:
    session = run.session.session if run.session is not None else None
    if session is None:
        yield
        return
    calls = _IN_FLIGHT.setdefault(session, [])
    calls.append(requester)
    try:
        yield
    finally:
        calls.remove(requester)
        if not calls:
            _IN_FLIGHT.pop(session, None)


# The progress callback of the call being sent (set by ``send_call``, read by the senders).
_PROGRESS: ContextVar[ProgressFnT | None] = ContextVar("pml_call_progress", default=None)


def _progress_for(requester: Requester | None, server: str, tool: str) -> ProgressFnT | None:
    if requester is None or not requester.wants_progress:
        return None
    return requester.progress_of(server, tool)


class _RawResult(BaseModel):
    """A result kept as the server's JSON object (the SDK still checks it against the protocol)."""

    model_config = ConfigDict(extra="allow")


async def typed_call(run: Run, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
    """The SDK's typed result."""
    return await run.client.call_tool(tool, arguments, progress_callback=_PROGRESS.get())


async def raw_call(run: Run, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The result as the server's JSON object (no model round trip).

    A 2026-07-28 server that needs input first (``input_required``: sampling, elicitation,
    roots) gets it as the typed path would: the session's callbacks answer each round."""
    session = run.client.session
    progress = _PROGRESS.get()

    async def send(
        responses: mcp_types.InputResponses | None, state: str | None
    ) -> dict[str, Any] | mcp_types.InputRequiredResult:
        params = mcp_types.CallToolRequestParams(
            name=tool, arguments=arguments, input_responses=responses, request_state=state
        )
        request = mcp_types.CallToolRequest(params=params)
        result = await session.send_request(request, _RawResult, progress_callback=progress)
        data = dict(result.model_extra or {})
        if data.get("resultType") == "input_required":
            return mcp_types.InputRequiredResult.model_validate(data, by_name=False)
        return data

    first = await send(None, None)
    if not isinstance(first, mcp_types.InputRequiredResult):
        return first

    async def dispatch(
        key: str, request: mcp_types.InputRequest
    ) -> mcp_types.InputResponse | mcp_types.ErrorData:
        meta = request.params.meta if request.params is not None else None
        context = ClientRequestContext(session=session, request_id=key, meta=meta)
        return await session.dispatch_input_request(context, request)

    return await run_input_required_driver(
        first, dispatch=dispatch, retry=send, max_rounds=run.client.input_required_max_rounds
    )


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
    requester = REQUESTER.get()
    progress = _PROGRESS.set(_progress_for(requester, server, tool))
    try:
        with (
            observe.step("upstream_call", server=server, tool=tool) as step,
            anyio.fail_after(timeout),
            _in_flight(run, requester),
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
    finally:
        _PROGRESS.reset(progress)
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
