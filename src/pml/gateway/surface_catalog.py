"""The prompts, resources and templates of every running upstream server, cached per server.

    catalog = SurfaceCatalog(pool, list_wait=window.wait)
    for server, prompt in await catalog.items("prompts"): ...
    server, name = await catalog.prompt_target("everything__args-prompt")
    server, uri = await catalog.resource_target("pml://everything/demo://resource/x")
    catalog.invalidate("everything", "prompts")     # on notifications/prompts/list_changed

A server's listing is fetched once through ``pool.session`` and kept until the server says
its list changed (or restarted). A server that fails to answer is left out of a listing
(and logged), never failing the others.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import anyio
import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from pml.errors import InvalidInput, NotFound, PmlError, UnknownTool
from pml.gateway.surface_names import (
    MAX_NAME_CHARS,
    MAX_URI_CHARS,
    mark_uri,
    namespaced,
    split_name,
    unmark_uri,
)
from pml.upstream.base import UpstreamPool
from pml.upstream.messages import close_matches, show
from pml.upstream.surface import SurfaceItem, SurfaceKind, fetch_listing, item_key, offers

logger = logging.getLogger(__name__)

KINDS: Final[tuple[SurfaceKind, ...]] = ("prompts", "resources", "templates")
LIST_TIMEOUT_S: Final = 10.0
# What a failing upstream listing may raise; the server is then left out of the listing.
LISTING_ERRORS = (PmlError, MCPError, TimeoutError, anyio.BrokenResourceError, OSError)


class SurfaceCatalog:
    """Per-server listings of prompts, resources and templates, and routing back to them."""

    def __init__(
        self,
        pool: UpstreamPool,
        *,
        list_wait: Callable[[], Awaitable[None]] | None = None,
        timeout_s: float = LIST_TIMEOUT_S,
        fetched: Callable[[str, Client], anyio.Event | None] | None = None,
    ) -> None:
        self._pool = pool
        self._fetched = fetched  # told of each session a listing came from
        self._list_wait = list_wait
        self._timeout_s = timeout_s
        self._cache: dict[tuple[str, SurfaceKind], list[SurfaceItem]] = {}
        self.listed: set[SurfaceKind] = set()  # kinds some client has listed: worth announcing

    def configured(self) -> list[str]:
        """Every configured server name."""
        return [status.name for status in self._pool.status()]

    def running(self) -> list[str]:
        """The servers whose session is open now."""
        return [status.name for status in self._pool.status() if status.state == "running"]

    def invalidate(self, server: str, kinds: Iterable[SurfaceKind] = KINDS) -> None:
        """Forget what ``server`` listed (its list changed, or it restarted)."""
        for kind in kinds:
            self._cache.pop((server, kind), None)

    def cached(self, server: str, kind: SurfaceKind) -> bool:
        """Whether ``server``'s listing of ``kind`` is known now (no I/O)."""
        return (server, kind) in self._cache

    async def items(self, kind: SurfaceKind) -> list[tuple[str, SurfaceItem]]:
        """Every running server's items of ``kind``, by server name (waits for servers still
        starting within the start window)."""
        self.listed.add(kind)
        if self._list_wait is not None:
            await self._list_wait()
        servers = sorted(self.running())
        found: dict[str, list[SurfaceItem]] = {}

        async def one(server: str) -> None:
            try:
                found[server] = await self.server_items(server, kind)
            except LISTING_ERRORS as error:
                logger.warning("upstream server %r: listing %s failed: %s", server, kind, error)

        async with anyio.create_task_group() as group:
            for server in servers:
                group.start_soon(one, server)
        return [(server, item) for server in servers for item in found.get(server, ())]

    async def server_items(
        self, server: str, kind: SurfaceKind, *, fresh: bool = False
    ) -> list[SurfaceItem]:
        """``server``'s items of ``kind`` (cached; ``fresh``: asked again). Raises the pool's
        errors for a server that is unknown, disabled or down."""
        key = (server, kind)
        if not fresh and key in self._cache:
            return self._cache[key]
        async with self._pool.session(server) as client:
            if not offers(client, kind):
                items: list[SurfaceItem] = []
            else:
                with anyio.fail_after(self._timeout_s):
                    items = await fetch_listing(client, kind)
            if self._fetched is not None:
                self._fetched(server, client)
        self._cache[key] = items
        return items

    async def watch_running(self) -> None:
        """Hand every running server's session to ``fetched`` (a client listens for list
        changes: make sure they are heard upstream)."""
        if self._fetched is None:
            return
        for server in self.running():
            try:
                async with self._pool.session(server) as client:
                    opened = self._fetched(server, client)
                if opened is not None:
                    with anyio.fail_after(self._timeout_s):
                        await opened.wait()
            except LISTING_ERRORS as error:
                logger.info("upstream server %r: not watched: %s", server, error)

    async def prompt_target(self, name: str) -> tuple[str, str]:
        """``(server, prompt)`` of a listed ``server__prompt`` name, or ``UnknownTool``."""
        _check_text(name, "prompt name", MAX_NAME_CHARS)
        configured = self.configured()
        found = split_name(name, configured)
        if found is None:
            hint = f"; servers: {', '.join(sorted(configured))}" if configured else ""
            raise UnknownTool(
                f"Unknown prompt '{show(name)}': prompts are named <server>__<prompt>{hint}",
                prompt=show(name),
            )
        server, prompt = found
        known = await self._keys(server, "prompts")
        if prompt not in known:
            names = [namespaced(server, key) for key in known]
            matches = close_matches(name, names)
            hint = f"; did you mean {', '.join(matches)}?" if matches else ""
            raise UnknownTool(
                f"Unknown prompt '{show(name)}': server '{server}' has no prompt "
                f"'{show(prompt)}'{hint}",
                prompt=show(name),
                server=server,
                suggestions=matches,
            )
        return server, prompt

    async def resource_target(self, uri: str) -> tuple[str, str]:
        """``(server, upstream URI)`` for a URI a client gave: a marked URI names its server;
        an upstream URI (from a tool result, say) goes to the one server that lists it, else
        the one whose template matches it, else the only server offering resources."""
        _check_text(uri, "resource URI", MAX_URI_CHARS)
        configured = self.configured()
        marked = unmark_uri(uri)
        if marked is not None and marked[0] in configured:
            return marked
        running = sorted(self.running())
        owners = [s for s in running if uri in await self._keys_quietly(s, "resources")]
        if not owners:
            owners = [s for s in running if await self._template_matches(s, uri)]
        if not owners:
            owners = [s for s in running if await self._offers_resources(s)]
            if len(owners) > 1:
                raise NotFound(f"Unknown resource '{show(uri)}'", uri=show(uri))
        if not owners:
            raise NotFound(
                f"Unknown resource '{show(uri)}': no running upstream server offers resources",
                uri=show(uri),
            )
        if len(owners) > 1:
            forms = ", ".join(show(mark_uri(server, uri)) for server in owners)
            raise InvalidInput(
                f"Resource '{show(uri)}' is offered by several servers "
                f"({', '.join(owners)}); read one of: {forms}",
                field="uri",
            )
        return owners[0], uri

    async def template_target(self, uri_template: str) -> tuple[str, str]:
        """``(server, upstream template)`` of a listed template (completion requests)."""
        _check_text(uri_template, "resource template URI", MAX_URI_CHARS)
        marked = unmark_uri(uri_template)
        if marked is not None and marked[0] in self.configured():
            return marked
        owners = [
            server
            for server in sorted(self.running())
            if uri_template in await self._keys_quietly(server, "templates")
        ]
        if len(owners) != 1:
            shown = show(uri_template)
            raise NotFound(f"Unknown resource template '{shown}'", uri=shown)
        return owners[0], uri_template

    async def _keys(self, server: str, kind: SurfaceKind) -> set[str]:
        keys = {item_key(item) for item in await self.server_items(server, kind)}
        if keys or not self.cached(server, kind):
            return keys
        return {item_key(item) for item in await self.server_items(server, kind, fresh=True)}

    async def _keys_quietly(self, server: str, kind: SurfaceKind) -> set[str]:
        try:
            return {item_key(item) for item in await self.server_items(server, kind)}
        except LISTING_ERRORS as error:
            logger.warning("upstream server %r: listing %s failed: %s", server, kind, error)
            return set()

    async def _template_matches(self, server: str, uri: str) -> bool:
        for template in await self._keys_quietly(server, "templates"):
            try:
                if UriTemplate.parse(template).match(uri) is not None:
                    return True
            except (InvalidUriTemplate, ValueError):
                continue
        return False

    async def _offers_resources(self, server: str) -> bool:
        try:
            async with self._pool.session(server) as client:
                return offers(client, "resources")
        except LISTING_ERRORS:
            return False


def _check_text(value: object, what: str, limit: int) -> None:
    """Refuse a name or URI that is not a string, is empty, or is huge (INVALID_INPUT)."""
    field = "name" if what.endswith("name") else "uri"
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"The {what} must be a non-empty string", field=field)
    if len(value) > limit:
        raise InvalidInput(f"The {what} is {len(value)} characters long (max {limit})", field=field)


def prompt_view(server: str, prompt: mcp_types.Prompt) -> mcp_types.Prompt:
    """The prompt as clients of the gateway see it: ``server__name``."""
    return prompt.model_copy(update={"name": namespaced(server, prompt.name)})


def resource_view(server: str, resource: mcp_types.Resource) -> mcp_types.Resource:
    """The resource as clients see it: ``server__name`` and a marked URI."""
    return resource.model_copy(
        update={"name": namespaced(server, resource.name), "uri": mark_uri(server, resource.uri)}
    )


def template_view(server: str, template: mcp_types.ResourceTemplate) -> mcp_types.ResourceTemplate:
    """The template as clients see it: ``server__name`` and a marked URI template."""
    return template.model_copy(
        update={
            "name": namespaced(server, template.name),
            "uri_template": mark_uri(server, template.uri_template),
        }
    )
