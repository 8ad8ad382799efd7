"""The tool surface of the gateway (SPEC §3): what ``tools/list`` shows and ``tools/call`` does.

    tools = GatewayTools(CapTools(registry), pool, expose_upstream=False,
                         executor=service, catalog=CapabilityToolCatalog(db), usage=recorder)
    await tools.list_tools(scope)       # pml_discover ... cap_curate, then mcp__ns__action ...
    await tools.call_tool(scope, "cap:list", {})   # structuredContent {"items": [], "total": 0}
    await tools.call_tool(scope, "mcp__fs__read_json", {"path": "a.json"})   # a capability

Every answer of our own tools is ``structuredContent`` plus the same JSON as one text
block; a failure is ``isError: true`` with ``{"error": {"code", "message", ...}}``. A
pass-through tool (``server__tool``, only with ``expose_upstream``) answers exactly what its
upstream server answered, error results included. A capability tool answers its result
(``structuredContent`` is the result when it is an object, else ``{"result": ...}``) with
PML's run details under ``_meta["pml/capability"]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

import mcp_types

from pml.errors import InternalError, InvalidInput, NotAvailable, NotFound, PmlError
from pml.execution.values import too_large_result
from pml.gateway.capability_tools import CapabilityToolCatalog
from pml.gateway.paging import cursor_for, cursor_offset
from pml.gateway.results import capability_result, error_result, json_result
from pml.gateway.schemas import (
    STATIC_TOOLS,
    STATIC_WIRE,
    CurateParams,
    DiscoverParams,
    ExecuteParams,
    tool_wire,
    within_depth,
)
from pml.gateway.tool_seams import Executor, UsageSink
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.fqdn import message_value
from pml.registry.names import CAPABILITY_TOOL_PREFIX
from pml.registry.names import TOOL_NAME_PATTERN as TOOL_NAME
from pml.registry.scope import Scope
from pml.registry.tools import CapTools, parse_params
from pml.sandbox.jsonvalue import bounded_json_size
from pml.upstream.base import PASS_THROUGH_SEPARATOR, UpstreamPool, UpstreamTool

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE: Final = 10_000
T = TypeVar("T")
SEED_PREFIXES = ("cap:", "pml:")  # the seed spellings cap:list, pml:execute, ...

ToolsChanged = Callable[[], Awaitable[None]]
# One of the gateway's own tools answered by a service (pml_discover, cap_curate): it parses
# its arguments and returns the tool's JSON answer, or raises a PmlError.
ToolHandler = Callable[[Scope, Mapping[str, Any] | None], Awaitable[dict[str, Any]]]


# Own tools whose service this GatewayTools was built without (an embedding of the tool
# surface, e.g. in tests): a well-formed call answers NOT_AVAILABLE.
_SERVICE_PARAMS: dict[str, type[Any]] = {
    "pml_execute": ExecuteParams,
    "pml_discover": DiscoverParams,
    "cap_curate": CurateParams,
}


class GatewayTools:
    """Lists and calls the gateway's tools for one caller scope at a time."""

    def __init__(
        self,
        cap_tools: CapTools,
        pool: UpstreamPool,
        *,
        expose_upstream: bool,
        executor: Executor | None = None,
        catalog: CapabilityToolCatalog | None = None,
        usage: UsageSink | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        handlers: Mapping[str, ToolHandler] | None = None,
        policy: PolicyEnforcer | None = None,
        list_wait: Callable[[], Awaitable[None]] | None = None,
        max_result_bytes: int | None = None,
    ) -> None:
        self._max_result_bytes = max_result_bytes  # of one pass-through result (None: any)
        self._list_wait = list_wait  # listings wait for servers still starting (StartWindow)
        self._cap_tools = cap_tools
        self._policy = policy
        self._handlers = dict(handlers or {})
        self._pool = pool
        self._executor = executor
        self._catalog = catalog
        self._usage = usage
        self._page_size = max(1, page_size)
        self._expose_upstream = expose_upstream
        self._cap_names = frozenset(cap_tools.names)
        self._pass_through: dict[str, UpstreamTool] = {}
        self._skipped: set[str] = set()
        self._listeners: list[ToolsChanged] = []
        if expose_upstream:
            pool.on_tools_changed(self._upstream_changed)

    @property
    def expose_upstream(self) -> bool:
        """Whether upstream tools are listed and callable as ``server__tool``."""
        return self._expose_upstream

    def on_tools_changed(self, listener: ToolsChanged) -> None:
        """Call ``listener()`` whenever the listed tools may have changed."""
        self._listeners.append(listener)

    async def list_tools(self, scope: Scope) -> list[mcp_types.Tool]:
        """The tools ``scope`` sees: the fixed ones, its capability tools, then pass-through
        tools if exposed."""
        tools = list(STATIC_TOOLS.values())
        if self._catalog is not None and self._executor is not None:
            tools.extend((await self._catalog.listing(scope)).tools)
        if self._expose_upstream:
            await self._refresh(wait=True)
            tools.extend(
                upstream.definition.model_copy(update={"name": name})
                for name, upstream in self._pass_through.items()
            )
        return tools

    async def list_page(
        self, scope: Scope, cursor: str | None
    ) -> tuple[list[mcp_types.Tool], str | None]:
        """One page of ``list_tools`` and the cursor of the next (None on the last page).

        A cursor that PML did not hand out is ``INVALID_INPUT``.
        """
        return self._page(await self.list_tools(scope), cursor)

    async def list_page_json(
        self, scope: Scope, cursor: str | None
    ) -> tuple[list[str], str | None]:
        """``list_page`` with each tool as the JSON text it is sent as (the stdio lane).

        Capability tools come pre-serialised with their cached listing, so a long list costs
        no serialisation per request.
        """
        items = list(STATIC_WIRE)
        if self._catalog is not None and self._executor is not None:
            items.extend((await self._catalog.listing(scope)).wire)
        if self._expose_upstream:
            await self._refresh(wait=True)
            items.extend(
                tool_wire(upstream.definition.model_copy(update={"name": name}))
                for name, upstream in self._pass_through.items()
            )
        return self._page(items, cursor)

    def _page(self, items: list[T], cursor: str | None) -> tuple[list[T], str | None]:
        start = cursor_offset(cursor) if cursor is not None else 0
        end = start + self._page_size
        return items[start:end], (cursor_for(end) if end < len(items) else None)

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """A listed tool's input schema by name, from what is known now (no I/O)."""
        static = STATIC_TOOLS.get(name)
        if static is not None:
            return static.input_schema
        upstream = self._pass_through.get(name) if self._expose_upstream else None
        return upstream.definition.input_schema if upstream is not None else None

    async def call_tool(
        self, scope: Scope, name: str, arguments: Mapping[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """Run one tool for ``scope``; every failure is an ``isError`` result, never a raise."""
        try:
            return await self._call(scope, name, arguments)
        except PmlError as error:
            return error_result(error)
        except Exception:  # the MCP edge: one broken call must not take the server down
            logger.exception("tool %s failed unexpectedly", message_value(name))
            return error_result(InternalError("Internal error while running the tool"))

    def is_gateway_tool(self, name: str) -> bool:
        """Whether ``name`` is one of the gateway's own tools (any accepted spelling)."""
        canonical = _canonical(name)
        if canonical in STATIC_TOOLS or canonical in self._cap_names:
            return True
        return self._executor is not None and name.startswith(CAPABILITY_TOOL_PREFIX)

    def pass_through_target(self, name: str) -> tuple[str, str] | None:
        """``(server, tool)`` of a listed ``server__tool`` name, from what is known now (no I/O)."""
        found = self._pass_through.get(name) if self._expose_upstream else None
        return None if found is None else (found.server, found.name)

    async def call_pass_through(
        self, scope: Scope, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """A pass-through call whose result stays the upstream's JSON object (fast lane).

        Same gate and errors as ``call_tool``: a failure is an ``isError`` result, never a raise.
        """
        try:
            request = await self._authorize(scope, server, tool, within_depth(arguments))
        except PmlError as error:  # refused: never sent, not counted as a tool call
            return _as_json(error_result(error))
        started = time.perf_counter()
        try:
            result = await self._pool.call_tool_raw(server, tool, arguments)
        except PmlError as error:
            failure = error_result(error)
        except Exception:  # the MCP edge: one broken call must not take the server down
            logger.exception("tool %s:%s failed unexpectedly", server, message_value(tool))
            failure = error_result(InternalError("Internal error while running the tool"))
        else:
            limit = self._max_result_bytes
            if limit is None or bounded_json_size(result, limit) <= limit:
                ok = result.get("isError") is not True
                self._count(scope, server, tool, started, ok, request)
                return result
            failure = error_result(too_large_result(f"{server}:{tool}", limit))
        self._count(scope, server, tool, started, False, request)
        return _as_json(failure)

    def _count(
        self,
        scope: Scope,
        server: str,
        tool: str,
        started: float,
        ok: bool,
        request: RequestPolicy | None = None,
    ) -> None:
        latency_ms = (time.perf_counter() - started) * 1000
        if self._usage is not None:
            self._usage.tool_call(scope, server, tool, latency_ms=latency_ms, success=ok)
        if self._policy is not None and request is not None:
            self._policy.tool_call_ended(
                request, f"{server}:{tool}", ok=ok, duration_ms=latency_ms, replayed=False
            )

    async def _call(
        self, scope: Scope, name: str, arguments: Mapping[str, Any] | None
    ) -> mcp_types.CallToolResult:
        canonical = _canonical(name)
        if canonical == "pml_execute" and self._executor is not None:
            return await self._execute(scope, arguments)
        within_depth(arguments)
        if canonical in self._cap_names:
            return json_result(await self._cap_tools.call(canonical, scope, arguments))
        handler = self._handlers.get(canonical)
        if handler is not None:
            return json_result(await handler(scope, arguments))
        params_model = _SERVICE_PARAMS.get(canonical)
        if params_model is not None:
            parse_params(params_model, arguments)  # a malformed call is told so first
            raise NotAvailable(f"{canonical} is not available in this gateway", tool=canonical)
        capability_tool = self._executor is not None and name.startswith(CAPABILITY_TOOL_PREFIX)
        if capability_tool and self._catalog is not None:
            fqdn = (await self._catalog.listing(scope)).fqdn_of(name)
            if fqdn is not None:
                return await self._capability_tool(scope, fqdn, arguments)
        address = await self._resolve_pass_through(name)
        if address is None:
            if capability_tool:  # not listed: an old tool name (an alias) runs with a warning
                return await self._capability_tool(scope, name, arguments)
            raise NotFound(f"Unknown tool: {message_value(name)}")
        server, tool = address
        request = await self._authorize(scope, server, tool, arguments)
        started = time.perf_counter()
        try:
            result = await self._pool.call_tool(server, tool, arguments)
            limit = self._max_result_bytes
            if (
                limit is not None
                and bounded_json_size(result.model_dump(exclude_none=True), limit) > limit
            ):
                raise too_large_result(f"{server}:{tool}", limit)
        except PmlError:
            self._count(scope, server, tool, started, False, request)
            raise
        self._count(scope, server, tool, started, not result.is_error, request)
        return result

    async def _authorize(
        self, scope: Scope, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> RequestPolicy | None:
        if self._policy is None:
            return None
        return await self._policy.authorize_direct(scope, server, tool, dict(arguments or {}))

    async def _capability_tool(
        self, scope: Scope, ref: str, arguments: Mapping[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """A named capability called as ``mcp__<namespace>__<action>`` (SPEC §6.6)."""
        assert self._executor is not None
        if arguments is not None and not isinstance(arguments, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput("arguments must be an object", field="arguments")
        answer = await self._executor.run_capability(scope, ref, dict(arguments or {}))
        return capability_answer(answer)

    def may_wait(self, name: str) -> bool:
        """Whether a call of ``name`` can pause for a person's approval."""
        if self._executor is None:
            return False
        return is_execute(name) or name.startswith(CAPABILITY_TOOL_PREFIX)

    async def _execute(
        self, scope: Scope, arguments: Mapping[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """``pml_execute``: its answer, or ``{"status": "error", "error": ...}`` (SPEC §5)."""
        assert self._executor is not None
        try:
            params = parse_params(ExecuteParams, within_depth(arguments))
            return json_result(await self._executor.execute(scope, params))
        except PmlError as error:
            return json_result({"status": "error", "error": error.to_dict()}, is_error=True)

    async def _resolve_pass_through(self, name: str) -> tuple[str, str] | None:
        """``(server, tool)`` of a ``server__tool`` name, through the listed names."""
        if not self._expose_upstream or not TOOL_NAME.fullmatch(name):
            return None
        found = self._pass_through.get(name)
        if found is None:  # not listed yet (stateless clients may call without listing)
            await self._refresh()
            found = self._pass_through.get(name)
        if found is not None:
            return found.server, found.name
        # A server that is not running lists nothing (failed at start, lazy without a stored
        # catalog): its calls go to the pool, which starts it or says why it cannot.
        for status in sorted(self._pool.status(), key=lambda s: len(s.name), reverse=True):
            prefix = status.name + PASS_THROUGH_SEPARATOR
            if status.state in ("running", "disabled") or not name.startswith(prefix):
                continue
            if len(name) > len(prefix):
                return status.name, name[len(prefix) :]
        return None

    async def _refresh(self, *, wait: bool = False) -> None:
        """Rebuild the ``server__tool`` map from the pool (names resolved, never split);
        ``wait``: for servers still starting, within the start window."""
        if wait and self._list_wait is not None:
            await self._list_wait()
        by_name: dict[str, list[UpstreamTool]] = {}
        for upstream in await self._pool.list_tools():
            by_name.setdefault(upstream.pass_through_name, []).append(upstream)
        table: dict[str, UpstreamTool] = {}
        for name, candidates in by_name.items():
            if not TOOL_NAME.fullmatch(name):
                self._skip_once(name, "is not a valid MCP tool name (^[A-Za-z0-9_-]{1,64}$)")
            elif len(candidates) > 1:
                servers = ", ".join(sorted({c.server for c in candidates}))
                self._skip_once(name, f"is ambiguous (servers {servers})")
            else:
                table[name] = candidates[0]
        self._pass_through = table

    def _skip_once(self, name: str, reason: str) -> None:
        if name not in self._skipped:
            self._skipped.add(name)
            logger.warning("upstream tool %s not exposed: the name %s", message_value(name), reason)

    async def _upstream_changed(self, server: str) -> None:
        await self._refresh()
        for listener in list(self._listeners):
            try:
                await listener()
            except Exception:  # a listener's failure must not stop the pool's refresh
                logger.exception("tools-changed listener failed (server %s)", server)


def _as_json(result: mcp_types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def capability_answer(answer: dict[str, Any]) -> mcp_types.CallToolResult:
    """A capability tool's answer: its result, or a paused or handed-back answer as JSON."""
    if answer.get("status") in ("approval_required", "execute_locally"):
        return json_result(answer)  # paused (resume with pml_execute), or for the client
    return capability_result(answer)


def is_execute(name: str) -> bool:
    """Whether ``name`` is ``pml_execute`` (any accepted spelling)."""
    return _canonical(name) == "pml_execute"


def _canonical(name: str) -> str:
    for prefix in SEED_PREFIXES:
        if name.startswith(prefix):
            return name.replace(":", "_", 1)
    return name
