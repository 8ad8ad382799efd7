"""The MCP session from ``pml connect`` to the shared gateway (streamable HTTP, API key).

    remote = RemoteGateway("https://pml.example.com", api_key, servers=["filesystem"])
    async with remote.running():
        tools = await remote.list_tools()
        result = await remote.call_tool("pml_discover", {"intent": "read a file"})

Every request carries ``Authorization: Bearer <key>``, ``X-PML-Client: pml-connect/<version>``
and ``X-PML-Client-Servers`` (the servers this machine runs), which is how the gateway knows
it may hand code back (``execute_locally``). One background task owns the session: it
connects, reconnects with a growing delay when the gateway goes away, and listens for the
gateway's ``tools/list_changed``. A call made while the gateway is unreachable fails at
once with ``UPSTREAM_UNAVAILABLE`` naming the URL; nothing is retried behind the agent's
back (a forwarded ``pml_execute`` is not idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml import __version__
from pml.config import ServerSettings
from pml.errors import InvalidInput, UpstreamUnavailable
from pml.execution.clients import CLIENT_HEADER, CLIENT_PRODUCT, SERVERS_HEADER
from pml.gateway.results import error_result
from pml.upstream.transport import StderrTail, fetch_tools, listen_for_tool_changes, open_client

logger = logging.getLogger(__name__)

ToolsChanged = Callable[[], Awaitable[None]]
CONNECT_WAIT_S = 5.0
RECONNECT_MIN_S = 0.2
RECONNECT_MAX_S = 10.0


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
    if not base.startswith(("http://", "https://")):
        raise InvalidInput(f"Server URL must start with http:// or https://: {base_url}")
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
    ) -> None:
        self.url = mcp_url(base_url)
        self._target = ServerSettings(url=self.url, headers=client_headers(api_key, servers))
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._connected = anyio.Event()
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

    async def wait_connected(self, timeout_s: float = CONNECT_WAIT_S) -> bool:
        """Whether a session is open within ``timeout_s``."""
        with anyio.move_on_after(timeout_s):
            await self._connected.wait()
        return self._client is not None

    async def list_tools(self) -> list[mcp_types.Tool]:
        client = await self._session()
        try:
            return await fetch_tools(client)
        except MCPError:
            raise
        except Exception as error:  # noqa: BLE001 - the transport failed: said as unreachable
            raise self._unreachable(error) from None

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None
    ) -> mcp_types.CallToolResult:
        """The gateway's answer; ``UPSTREAM_UNAVAILABLE`` when it cannot be reached."""
        client = await self._session()
        try:
            return await client.call_tool(name, arguments)
        except MCPError as error:  # a protocol-level refusal: the agent is told, as a result
            message = f"The PML server refused the call: {error.error.message}"
            return error_result(UpstreamUnavailable(message, server="pml"))
        except Exception as error:  # noqa: BLE001 - the transport failed: said as unreachable
            raise self._unreachable(error) from None

    async def _session(self) -> Client:
        # Only the very first connection is waited for: once the gateway has been found
        # unreachable, calls fail at once until the background task reconnects.
        if self._client is None and (self._gave_up or not await self.wait_connected()):
            raise UpstreamUnavailable(
                f"The PML server at {self.url} is unreachable ({self._last_error})",
                server="pml",
            )
        assert self._client is not None
        return self._client

    def _unreachable(self, error: BaseException) -> UpstreamUnavailable:
        self._last_error = str(error) or type(error).__name__
        self._lost.set()
        return UpstreamUnavailable(
            f"The PML server at {self.url} is unreachable ({self._last_error})", server="pml"
        )

    async def _maintain(self) -> None:
        delay = RECONNECT_MIN_S
        while True:
            lost = self._lost = anyio.Event()
            try:
                async with AsyncExitStack() as stack:
                    client = await open_client(
                        stack,
                        self._target,
                        on_message=self._on_message,
                        on_closed=lost.set,
                        stderr=StderrTail("pml"),
                    )
                    await listen_for_tool_changes(stack, client)
                    self._client, self._gave_up = client, False
                    self._connected.set()
                    delay = RECONNECT_MIN_S
                    logger.info("connected to the PML server at %s", self.url)
                    await self._changed()  # what was listed while away may differ now
                    await lost.wait()
            except Exception as error:  # noqa: BLE001 - unreachable or refused: try again later
                self._last_error = str(error) or type(error).__name__
                self._gave_up = True
                log = logger.warning if delay == RECONNECT_MIN_S else logger.debug
                log("cannot reach the PML server at %s: %s", self.url, self._last_error)
            if self._client is not None:
                logger.warning("lost the PML server at %s; reconnecting", self.url)
            self._client, self._connected = None, anyio.Event()
            await anyio.sleep(delay)
            delay = min(RECONNECT_MAX_S, delay * 2)

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            await self._changed()

    async def _changed(self) -> None:
        if self._on_tools_changed is not None:
            try:
                await self._on_tools_changed()
            except Exception:
                logger.exception("tools-changed listener failed")
