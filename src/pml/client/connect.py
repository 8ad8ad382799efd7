"""``pml connect``: the agent's MCP server on the user's machine, backed by a shared PML.

    tools = ConnectTools(remote, runner, syncer)
    await tools.list_tools()                       # the shared gateway's tools, as it lists them
    await tools.call_tool("pml_execute", {...})    # forwarded; execute_locally runs here

Every tool the gateway lists is offered as is (``pml_discover``, ``pml_execute``, the
``cap_*`` tools and the caller's capability tools); every call is forwarded with the API key.
When the gateway answers ``execute_locally`` (the code uses servers this machine runs), the
code runs here, in the local sandbox against the local servers, through this machine's
enforcement point; the agent gets the result at once and the run's trace goes to the trace
syncer (durable queue, sent in the background), from which the gateway learns the
capability. While the gateway cannot be reached, a ``pml_execute`` whose code only uses this
machine's servers still runs here (``"offline": true``); its trace carries the code, intent
and requested name, and the gateway checks and learns it when the trace arrives. Until the
gateway has been reached once, the fixed tools are listed; when it
changes its list (a capability named, renamed), the agent is told (``list_changed``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, cast

import mcp_types

from pml.client.runner import LocalRun, LocalRunner
from pml.errors import InternalError, PmlError, UnknownTool, UpstreamUnavailable
from pml.gateway.results import capability_result, error_result, json_result
from pml.gateway.schemas import STATIC_TOOLS, ExecuteParams
from pml.registry.names import CAPABILITY_TOOL_PREFIX
from pml.registry.tools import parse_params

logger = logging.getLogger(__name__)

Notify = Callable[[], Awaitable[None]]
# Calls after which the gateway's tool list may differ (new or renamed capability tools).
CHANGING_TOOLS = frozenset({"pml_execute", "cap_rename", "cap_curate", "cap:rename", "cap:curate"})


class Remote(Protocol):
    """The shared gateway (``pml.client.remote.RemoteGateway``)."""

    async def list_tools(self) -> list[mcp_types.Tool]: ...

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None
    ) -> mcp_types.CallToolResult: ...


class TraceSink(Protocol):
    """Where run traces go (``pml.client.syncer.TraceSyncer``)."""

    def enqueue(self, trace: Mapping[str, Any]) -> None: ...


class ConnectTools:
    """The tool surface of ``pml connect``."""

    def __init__(self, remote: Remote, runner: LocalRunner, traces: TraceSink) -> None:
        self._remote = remote
        self._runner = runner
        self._traces = traces
        self._tools: list[mcp_types.Tool] = list(STATIC_TOOLS.values())
        self._signature = _signature(self._tools)
        self._listeners: list[Notify] = []

    def on_tools_changed(self, listener: Notify) -> None:
        self._listeners.append(listener)

    async def list_tools(self) -> list[mcp_types.Tool]:
        """The gateway's tools (the last list it gave when it cannot be reached now)."""
        await self.refresh(notify=False)
        return list(self._tools)

    async def gateway_changed(self) -> None:
        """The gateway said its list changed (or it was reached again): fetch it."""
        await self.refresh()

    async def refresh(self, *, notify: bool = True) -> bool:
        """Fetch the gateway's list; whether it changed (listeners told when ``notify``)."""
        try:
            tools = await self._remote.list_tools()
        except PmlError as error:
            logger.debug("tool list not refreshed: %s", error.message)
            return False
        except Exception:  # a protocol-level refusal: keep what we have
            logger.exception("tool list not refreshed")
            return False
        signature = _signature(tools)
        if signature == self._signature:
            return False
        self._tools, self._signature = tools, signature
        if notify:
            for listener in list(self._listeners):
                await listener()
        return True

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """Forward one call; run handed-back code here. Never raises."""
        try:
            result = await self._remote.call_tool(name, dict(arguments or {}))
        except UpstreamUnavailable as error:
            if name == "pml_execute":
                return await self._offline(arguments, error)
            return _failure(name, error)
        except PmlError as error:
            return _failure(name, error)
        except Exception:
            logger.exception("forwarding %s failed", name)
            return _failure(name, InternalError("Internal error while forwarding the call"))
        handoff = _handoff(result)
        if handoff is None:
            if name in CHANGING_TOOLS and not result.is_error:
                await self.refresh()
            return result
        run = await self._run(handoff)
        if run is None:
            return _failure(name, InternalError("Internal error while running the code here"))
        self._enqueue(run)
        if name.startswith(CAPABILITY_TOOL_PREFIX):
            return _capability_answer(run, handoff)
        return json_result(run.answer(), is_error=not run.success)

    async def _offline(
        self, arguments: Mapping[str, Any] | None, unreachable: UpstreamUnavailable
    ) -> mcp_types.CallToolResult:
        """The gateway is unreachable: code that only uses this machine's servers runs here
        anyway; its trace carries the code, and the gateway learns from it when back."""
        try:
            params = parse_params(ExecuteParams, arguments)
        except PmlError as error:
            return _failure("pml_execute", error)
        if params.code is None or params.update or params.continue_workflow is not None:
            return _failure("pml_execute", unreachable)
        handoff: dict[str, Any] = {
            "workflowId": f"wf_c_{uuid.uuid4().hex}",
            "code": params.code,
            "args": params.args or {},
            "intent": params.intent,
        }
        if params.options is not None and params.options.timeout_ms is not None:
            handoff["timeoutMs"] = params.options.timeout_ms
        run = await self._run(handoff)
        if run is None:
            return _failure("pml_execute", InternalError("Internal error while running the code"))
        if isinstance(run.error, UnknownTool):  # it needs the gateway's servers
            message = f"{unreachable.message}; this code needs tools this machine does not run"
            return _failure("pml_execute", UpstreamUnavailable(message, **unreachable.data))
        offline = {"code": params.code, "intent": params.intent}
        if params.name is not None:
            offline["name"] = params.name
        if params.routing is not None:
            offline["routing"] = params.routing
        answer = run.answer()
        answer["offline"] = True
        if run.success and not run.tools_used:  # the gateway would run it: nothing to learn
            answer["capture"] = "none"
        else:
            self._enqueue(run, offline=offline)
        return json_result(answer, is_error=not run.success)

    async def _run(self, handoff: Mapping[str, Any]) -> LocalRun | None:
        """The local run (None after an unexpected failure, logged: never raised)."""
        try:
            return await self._runner.run(handoff)
        except Exception:
            logger.exception("running %s here failed", handoff.get("workflowId"))
            return None

    def _enqueue(self, run: LocalRun, *, offline: dict[str, Any] | None = None) -> None:
        trace = run.trace()
        if offline is not None:
            trace["offline"] = offline
        try:
            self._traces.enqueue(trace)
        except Exception:  # the agent's answer never depends on the syncer
            logger.exception("trace of %s not queued", run.workflow_id)


def _signature(tools: list[mcp_types.Tool]) -> str:
    dumped = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
    return json.dumps(dumped, sort_keys=True)


def _handoff(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    """The ``execute_locally`` answer a result carries, if it is one."""
    content: object = result.structured_content
    if result.is_error or not isinstance(content, dict):
        return None
    answer = cast(dict[str, Any], content)
    return answer if answer.get("status") == "execute_locally" else None


def _failure(name: str, error: PmlError) -> mcp_types.CallToolResult:
    if name == "pml_execute":  # pml_execute's failures are its {"status": "error"} answer
        return json_result({"status": "error", "error": error.to_dict()}, is_error=True)
    return error_result(error)


def _capability_answer(run: LocalRun, handoff: Mapping[str, Any]) -> mcp_types.CallToolResult:
    """A capability tool run here: its value, as the gateway would have answered it."""
    if run.error is not None:
        return error_result(run.error)
    answer = run.answer()
    for key in ("capabilityFqdn", "capabilityName"):
        if key in handoff:
            answer[key] = handoff[key]
    return capability_result(answer)
