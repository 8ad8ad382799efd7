"""The MCP session from ``pml connect`` to the shared gateway (streamable HTTP, API key).

    remote = RemoteGateway("https://pml.example.com", api_key, servers=["filesystem"])
    async with remote.running():
        tools = await remote.list_tools()
        result = await remote.call_tool("pml_discover", {"intent": "read a file"})

Every request carries ``Authorization: Bearer <key>``, ``X-PML-Client: pml-connect/<version>``
and ``X-PML-Client-Servers`` (the servers this machine runs), which is how the gateway knows
it may hand code back (``execute_locally``). One background task owns the session: it
connects, reconnects with a growing delay when the gateway goes away, and listens for the
gateway's ``tools/list_changed``. A call made while the gateway is unreachable (never
reached, refused, or gone: a closed connection is not a refusal) fails at once with
``UPSTREAM_UNAVAILABLE`` naming the URL; only the very first connection attempt is waited
for. Nothing is retried behind the agent's back (a forwarded ``pml_execute`` is not
idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import mcp_types
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from pml import __version__
from pml.config import ServerSettings
from pml.errors import InvalidInput, UpstreamUnavailable
from pml.execution.clients import CLIENT_HEADER, CLIENT_PRODUCT, SERVERS_HEADER
from pml.gateway.results import error_result
from pml.upstream.events import ClientCallbacks
from pml.upstream.transport import StderrTail, fetch_tools, listen_for_tool_changes, open_client

logger = logging.getLogger(__name__)

ToolsChanged = Callable[[], Awaitable[None]]
CONNECT_WAIT_S = 5.0
RECONNECT_MIN_S = 0.2
RECONNECT_MAX_S = 10.0
PROBE_TIMEOUT_S = 3.0


def client_headers(api_key: str, servers: Sequence[str]) -> dict[str, str]:
    """The headers of every request to the gateway (MCP and ``/api/traces``)."""
    return {
        "Authorization": f"Bearer {api_key}",
        CLIENT_HEADER: f"{CLIENT_PRODUCT}/{__version__}",
        SERVERS_HEADER: ",".join(servers),
    }


def mcp_url(base_url: str) -> str:
    """``base_url`` (with or without ``/mcp``) as the gateway's MCP endpoint."""
    base = base_url.rstrip("/")
    try:
        parts = urlsplit(base)
        host, _port = parts.hostname, parts.port  # a port that is not a number raises
    except ValueError:
        host = None
    if not base.startswith(("http://", "https://")) or not host:
        raise InvalidInput(f"Server URL must be http(s)://host[:port]: {base_url}")
    return base if base.endswith("/mcp") else f"{base}/mcp"


class RemoteGateway:
    """A reconnecting MCP client session to the shared gateway."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        servers: Sequence[str] = (),
        on_tools_changed: ToolsChanged | None = None,
        elicitation: ElicitationFnT | None = None,
    ) -> None:
        self.url = mcp_url(base_url)
        self._elicitation = elicitation
        self._target = ServerSettings(url=self.url, headers=client_headers(api_key, servers))
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._connected = anyio.Event()
        self._first_attempt = anyio.Event()  # set once the first attempt ends, either way
        self._lost = anyio.Event()
        self._last_error = "not connected yet"
        self._gave_up = False

    @property
    def connected(self) -> bool:
        return self._client is not None

    def on_tools_changed(self, listener: ToolsChanged) -> None:
        """Call ``listener()`` when the gateway says its tool list changed (and on connect)."""
        self._on_tools_changed = listener

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[RemoteGateway]:
        """Keep a session open (reconnecting) while the block runs."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._maintain)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()
        self._forget()

    async def wait_connected(self, timeout_s: float = CONNECT_WAIT_S) -> bool:
        """Whether a session is open within ``timeout_s``."""
        with anyio.move_on_after(timeout_s):
            await self._connected.wait()
        return self._client is not None

    async def list_tools(self) -> list[mcp_types.Tool]:
        client = await self._session()
        try:
            return await fetch_tools(client)
        except MCPError as error:
            if error.error.code == CONNECTION_CLOSED:
                raise self._unreachable(error, client) from None
            raise
        except Exception as error:  # noqa: BLE001 - the transport failed: said as unreachable
            raise self._unreachable(error, client) from None

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """The gateway's answer; ``UPSTREAM_UNAVAILABLE`` when it cannot be reached."""
        client = await self._session()
        try:
            return await client.call_tool(name, arguments)
        except MCPError as error:  # a protocol-level refusal: the agent is told, as a result
            if error.error.code == CONNECTION_CLOSED:  # the gateway went away: not a refusal
                raise self._unreachable(error, client) from None
            message = f"The PML server refused the call: {error.error.message}"
            return error_result(UpstreamUnavailable(message, server="pml"))
        except Exception as error:  # noqa: BLE001 - the transport failed: said as unreachable
            raise self._unreachable(error, client) from None

    async def _session(self) -> Client:
        # Only the very first connection attempt is waited for (not past its failure): once
        # the gateway has been found unreachable, or lost, calls fail at once until the
        # background task reconnects.
        if self._client is None and not self._gave_up:
            with anyio.move_on_after(CONNECT_WAIT_S):
                await self._first_attempt.wait()
        client = self._client
        if client is None:
            raise UpstreamUnavailable(
                f"The PML server at {self.url} is unreachable ({self._last_error})",
                server="pml",
            )
        return client

    def _unreachable(self, error: BaseException, client: Client) -> UpstreamUnavailable:
        self._last_error = _reason(error)
        if client is self._client:  # not an older session's late failure
            self._lost.set()
            self._forget()
        return UpstreamUnavailable(
            f"The PML server at {self.url} is unreachable ({self._last_error})", server="pml"
        )

    async def _maintain(self) -> None:
        delay = RECONNECT_MIN_S
        while True:
            lost = self._lost = anyio.Event()
            connected = False
            try:
                async with AsyncExitStack() as stack:
                    client = await open_client(
                        stack,
                        self._target,
                        on_message=self._on_message,
                        on_closed=lost.set,
                        stderr=StderrTail("pml"),
                        callbacks=ClientCallbacks(elicitation=self._elicitation),
                    )
                    await listen_for_tool_changes(stack, client)
                    connected, delay = True, RECONNECT_MIN_S
                    self._client, self._gave_up = client, False
                    self._last_error = "the connection was closed"
                    self._connected.set()
                    self._first_attempt.set()
                    logger.info("connected to the PML server at %s", self.url)
                    await self._changed()  # what was listed while away may differ now
                    await lost.wait()
                    self._forget()  # calls fail at once from now on, not on the closing session
            except Exception as error:  # noqa: BLE001 - unreachable or refused: try again later
                if connected:  # closing the lost session failed: nothing more to say
                    logger.debug("closing the session to %s: %s", self.url, _reason(error))
                else:
                    self._last_error = await self._refusal() or _reason(error)
                    log = logger.warning if delay == RECONNECT_MIN_S else logger.debug
                    log("cannot reach the PML server at %s: %s", self.url, self._last_error)
            if connected:
                logger.warning("lost the PML server at %s; reconnecting", self.url)
            self._forget()
            self._first_attempt.set()
            await anyio.sleep(delay)
            delay = min(RECONNECT_MAX_S, delay * 2)

    async def _refusal(self) -> str | None:
        """Why the gateway refuses this client, when it does (the MCP client does not say
        whether a failed connection was a refused key): one ``GET /api/capabilities``."""
        import httpx

        probe = self.url.removesuffix("/mcp") + "/api/capabilities?limit=1"
        try:
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False) as http:
                reply = await http.get(probe, headers=self._target.headers)
        except httpx.HTTPError:
            return None  # not reachable at all: the connection error says it
        if reply.status_code in (401, 403):
            return f"the server refused the API key (HTTP {reply.status_code})"
        return None

    def _forget(self) -> None:
        """No session now: calls fail at once until the next connection."""
        self._client, self._gave_up = None, True
        if self._connected.is_set():  # an unset one may have waiters: they keep it
            self._connected = anyio.Event()

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            await self._changed()

    async def _changed(self) -> None:
        if self._on_tools_changed is not None:
            try:
                await self._on_tools_changed()
            except Exception:
                logger.exception("tools-changed listener failed")


def _reason(error: BaseException) -> str:
    """What went wrong, for one line: the first error inside exception groups."""
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        return _reason(group.exceptions[0]) if group.exceptions else "ExceptionGroup"
    if isinstance(error, MCPError):
        return error.error.message
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
