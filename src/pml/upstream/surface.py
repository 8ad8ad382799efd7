"""What one upstream server offers besides tools: its prompts, resources and templates.

    async with pool.session("everything") as client:
        if offers(client, "prompts"):
            prompts = await fetch_listing(client, "prompts")      # every page

Listings are read page by page up to ``MAX_PAGES``; an item repeated across pages is kept
once (the last one wins, as for tools).
"""

from __future__ import annotations

from typing import Final, Literal

import mcp_types
from mcp import Client

MAX_PAGES: Final = 100

SurfaceKind = Literal["prompts", "resources", "templates"]
SurfaceItem = mcp_types.Prompt | mcp_types.Resource | mcp_types.ResourceTemplate


def offers(client: Client, kind: SurfaceKind) -> bool:
    """Whether the server declared the capability that ``kind`` belongs to."""
    capabilities = client.server_capabilities
    return (capabilities.prompts if kind == "prompts" else capabilities.resources) is not None


def offers_logging(client: Client) -> bool:
    """Whether the server declared the logging capability (``logging/setLevel``)."""
    return client.server_capabilities.logging is not None


def offers_subscribe(client: Client) -> bool:
    """Whether the server declared ``resources.subscribe``."""
    resources = client.server_capabilities.resources
    return resources is not None and resources.subscribe is True


def item_key(item: SurfaceItem) -> str:
    """What identifies an item on its server: a prompt's name, a resource's URI."""
    if isinstance(item, mcp_types.Prompt):
        return item.name
    if isinstance(item, mcp_types.Resource):
        return item.uri
    return item.uri_template


async def fetch_listing(client: Client, kind: SurfaceKind) -> list[SurfaceItem]:
    """Every item of ``kind`` the server lists, across pages (bypassing any client cache)."""
    found: dict[str, SurfaceItem] = {}
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page_items: list[SurfaceItem]
        if kind == "prompts":
            page = await client.list_prompts(cursor=cursor, cache_mode="bypass")
            page_items, cursor = list(page.prompts), page.next_cursor
        elif kind == "resources":
            listed = await client.list_resources(cursor=cursor, cache_mode="bypass")
            page_items, cursor = list(listed.resources), listed.next_cursor
        else:
            templates = await client.list_resource_templates(cursor=cursor, cache_mode="bypass")
            page_items, cursor = list(templates.resource_templates), templates.next_cursor
        found.update((item_key(item), item) for item in page_items)
        if not cursor:
            break
    return list(found.values())
