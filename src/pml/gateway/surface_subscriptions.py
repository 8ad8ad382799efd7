"""Resource subscriptions: clients subscribe through the gateway, the gateway upstream.

    subs = ResourceSubscriptions(pool, publish=notifier.broadcast)
    async with subs.running():
        await subs.subscribe(connection, "pml://everything/demo://x", ("everything", "demo://x"))
        async with subs.streaming({"pml://everything/demo://x": target}):   # a 2026-07-28 listen
            ...
        await subs.updated("everything", "demo://x")    # from upstream: to its subscribers only

One upstream subscription per ``(server, uri)`` however many clients want it: taken when the
first client subscribes, dropped when none wants it any more (clients that went away are
noticed on the next update). A 2025-11-25 upstream server gets ``resources/subscribe``; a
2026-07-28 one a ``subscriptions/listen`` stream held open for the URI. Each client is told
of an update under the URI it subscribed with.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc
import mcp_types
from mcp import Client
from mcp.server.connection import Connection
from mcp.server.subscriptions import ResourceUpdated, ServerEvent
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.errors import InvalidInput, PmlError
from pml.upstream.base import UpstreamPool
from pml.upstream.surface import offers_subscribe

logger = logging.getLogger(__name__)

Target = tuple[str, str]  # (server, upstream URI)
MAX_SUBSCRIPTIONS_PER_CLIENT: Final = 1_000
UPSTREAM_TIMEOUT_S: Final = 30.0
SUBSCRIBE_ERRORS = (
    MCPError,
    PmlError,
    TimeoutError,
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)


class ResourceSubscriptions:
    """Who subscribed to which upstream resource, under which URI."""

    def __init__(
        self, pool: UpstreamPool, *, publish: Callable[[ServerEvent], Awaitable[None]]
    ) -> None:
        self._pool = pool
        self._publish = publish
        self._sessions: weakref.WeakKeyDictionary[Connection, dict[str, Target]] = (
            weakref.WeakKeyDictionary()
        )
        self._streams: dict[object, Mapping[str, Target]] = {}
        self._upstream: dict[Target, anyio.CancelScope | None] = {}
        self._lock = anyio.Lock()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._watched: dict[str, int] = {}  # server -> id of the session whose lists we hear

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[ResourceSubscriptions]:
        """Hold the tasks of upstream listen streams; end them all on exit."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    def watch_lists(self, server: str, client: Client) -> anyio.Event | None:
        """On a 2026-07-28 session, hold a listen stream for prompt and resource list
        changes (2025-11-25 servers send them on the session itself); the event is set
        once the stream is open (or failed)."""
        if self._tasks is None or self._watched.get(server) == id(client):
            return None
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        capabilities = client.server_capabilities
        prompts = capabilities.prompts is not None and capabilities.prompts.list_changed is True
        resources = capabilities.resources
        changes = resources is not None and resources.list_changed is True
        if not (prompts or changes):
            return None
        self._watched[server] = id(client)
        opened = anyio.Event()

        async def hold() -> None:
            try:
                async with client.listen(
                    prompts_list_changed=prompts, resources_list_changed=changes
                ):
                    opened.set()
                    await anyio.sleep_forever()
            except SUBSCRIBE_ERRORS as error:
                logger.info("upstream %r: list-change stream ended: %s", server, error)
            finally:
                opened.set()
                if self._watched.get(server) == id(client):
                    del self._watched[server]

        self._tasks.start_soon(hold)
        return opened

    def subscribed(self, server: str, uri: str) -> bool:
        """Whether the gateway holds an upstream subscription to ``uri`` of ``server``."""
        return (server, uri) in self._upstream

    async def subscribe(self, connection: Connection, uri: str, target: Target) -> None:
        """Subscribe a 2025-11-25 session to ``target`` under ``uri`` (idempotent)."""
        held = self._sessions.setdefault(connection, {})
        if uri not in held and len(held) >= MAX_SUBSCRIPTIONS_PER_CLIENT:
            raise InvalidInput(
                f"Too many resource subscriptions on this session (max "
                f"{MAX_SUBSCRIPTIONS_PER_CLIENT})",
                field="uri",
            )
        previous = held.get(uri)
        held[uri] = target  # wanted before it is taken: an early update must not drop it
        try:
            await self._retain(target, strict=True)
        except BaseException:
            if previous is None:
                held.pop(uri, None)
            raise

    async def unsubscribe(self, connection: Connection, uri: str) -> bool:
        """Drop a session's subscription (False: it had none under ``uri``)."""
        held = self._sessions.get(connection, {})
        found = held.pop(uri, None) is not None
        await self._release_unwanted()
        return found

    @asynccontextmanager
    async def streaming(self, uris: Mapping[str, Target]) -> AsyncGenerator[None]:
        """Subscriptions of one 2026-07-28 listen stream, held while it is open."""
        token = object()
        self._streams[token] = dict(uris)
        try:
            for target in set(uris.values()):
                await self._retain(target, strict=False)
            yield
        finally:
            self._streams.pop(token, None)
            with anyio.CancelScope(shield=True):
                await self._release_unwanted()

    async def updated(self, server: str, uri: str) -> None:
        """Tell the clients subscribed to ``uri`` of ``server`` that it changed."""
        target = (server, uri)
        told = False
        for connection, held in list(self._sessions.items()):
            for form, wanted in list(held.items()):
                if wanted == target:
                    await connection.send_resource_updated(form)
                    told = True
        forms = {form for held in self._streams.values() for form, t in held.items() if t == target}
        for form in sorted(forms):
            await self._publish(ResourceUpdated(uri=form))
        if not (told or forms) and self._tasks is not None:
            self._tasks.start_soon(self._release_unwanted)  # subscribers went away

    async def forget_server(self, server: str) -> None:
        """A server restarted or went away: its upstream subscriptions are gone with it."""
        for target in [t for t in self._upstream if t[0] == server]:
            scope = self._upstream.pop(target)
            if scope is not None:
                scope.cancel()

    async def resubscribe(self, server: str) -> None:
        """Take again the subscriptions clients hold on ``server`` (after it restarted)."""
        await self.forget_server(server)
        for target in {t for t in self._wanted() if t[0] == server}:
            try:
                await self._retain(target, strict=False)
            except SUBSCRIBE_ERRORS as error:
                logger.warning("upstream server %r: resubscribing failed: %s", server, error)

    def _wanted(self) -> set[Target]:
        wanted = {t for held in self._sessions.values() for t in held.values()}
        wanted.update(t for held in self._streams.values() for t in held.values())
        return wanted

    async def _retain(self, target: Target, *, strict: bool) -> None:
        async with self._lock:
            if target in self._upstream:
                return
            server, uri = target
            try:
                with anyio.fail_after(UPSTREAM_TIMEOUT_S):
                    self._upstream[target] = await self._open(server, uri)
            except SUBSCRIBE_ERRORS as error:
                if strict:
                    raise
                logger.warning("upstream server %r: cannot subscribe to %r: %s", server, uri, error)

    async def _open(self, server: str, uri: str) -> anyio.CancelScope | None:
        async with self._pool.session(server) as client:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await self._listen(server, uri)
            if not offers_subscribe(client):
                raise MCPError(
                    mcp_types.INVALID_PARAMS,
                    f"Upstream server '{server}' does not support resource subscriptions",
                )
            request = mcp_types.SubscribeRequest(params=mcp_types.SubscribeRequestParams(uri=uri))
            await client.session.send_request(request, mcp_types.EmptyResult)
            return None

    async def _listen(self, server: str, uri: str) -> anyio.CancelScope:
        """A listen stream for ``uri`` on a 2026-07-28 server, held by a task (its updates
        reach the pool's relay like every other notification)."""
        if self._tasks is None:
            raise MCPError(mcp_types.INTERNAL_ERROR, "The gateway is not serving subscriptions")
        scope = anyio.CancelScope()
        acked = anyio.Event()

        async def hold() -> None:
            with scope:
                try:
                    async with (
                        self._pool.session(server) as client,
                        client.listen(resource_subscriptions=[uri]),
                    ):
                        acked.set()
                        await anyio.sleep_forever()
                except (MCPError, OSError, anyio.BrokenResourceError) as error:
                    logger.warning("upstream %r: listen for %r ended: %s", server, uri, error)
                finally:
                    acked.set()
                    if self._upstream.get((server, uri)) is scope:
                        self._upstream.pop((server, uri), None)

        self._tasks.start_soon(hold)
        await acked.wait()
        return scope

    async def _release_unwanted(self) -> None:
        wanted = self._wanted()
        async with self._lock:
            for target in [t for t in self._upstream if t not in wanted]:
                scope = self._upstream.pop(target)
                if scope is not None:
                    scope.cancel()
                    continue
                server, uri = target
                try:
                    with anyio.fail_after(UPSTREAM_TIMEOUT_S):
                        async with self._pool.session(server) as client:
                            params = mcp_types.UnsubscribeRequestParams(uri=uri)
                            request = mcp_types.UnsubscribeRequest(params=params)
                            await client.session.send_request(request, mcp_types.EmptyResult)
                except SUBSCRIBE_ERRORS as error:  # best effort: the server may be gone already
                    logger.info("upstream server %r: unsubscribe %r failed: %s", server, uri, error)
