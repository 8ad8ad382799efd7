"""A small in-process upstream server with prompts, resources, templates and completions.

    library = Library("a")
    pool = ClientPool({"a": library.server})      # the pool speaks 2026-07-28 to it
    await library.add_prompt("later")             # announced on its listen streams
    await library.touch("note://a/readme")        # a resource update for listening streams

It records what it was asked (``asked``), so a test can check that a refused request never
reached it.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
)

Ctx = ServerRequestContext[Any, Any]
SHARED_URI = "shared://same"


class Library:
    """Prompts ``greet`` (argument ``who``), resources ``note://<name>/readme`` and
    ``shared://same`` (on every library: a colliding URI), template ``note://<name>/{id}``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.prompts = ["greet"]
        self.asked: list[tuple[str, str]] = []
        self.listens: list[list[str]] = []  # resource URIs of each listen stream opened
        self.bus = InMemorySubscriptionBus()
        listen = ListenHandler(self.bus)

        async def on_listen(
            ctx: Ctx, params: mcp_types.SubscriptionsListenRequestParams
        ) -> mcp_types.SubscriptionsListenResult:
            self.listens.append(list(params.notifications.resource_subscriptions or []))
            return await listen(ctx, params)

        self.server: Server[Any] = Server(
            name,
            on_list_tools=self._list_tools,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read,
            on_completion=self._complete,
            on_subscriptions_listen=on_listen,
        )

    @property
    def readme(self) -> str:
        return f"note://{self.name}/readme"

    async def add_prompt(self, prompt: str) -> None:
        """Add a prompt and announce the change."""
        self.prompts.append(prompt)
        await self.bus.publish(PromptsListChanged())

    async def touch(self, uri: str) -> None:
        """Announce that ``uri`` changed."""
        await self.bus.publish(ResourceUpdated(uri=uri))

    async def _list_tools(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[])

    async def _list_prompts(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListPromptsResult:
        argument = mcp_types.PromptArgument(name="who", required=True)
        prompts = [mcp_types.Prompt(name=name, arguments=[argument]) for name in self.prompts]
        return mcp_types.ListPromptsResult(prompts=prompts)

    async def _get_prompt(
        self, ctx: Ctx, params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        self.asked.append(("prompts/get", params.name))
        who = (params.arguments or {}).get("who", "nobody")
        text = mcp_types.TextContent(type="text", text=f"{self.name} greets {who}")
        message = mcp_types.PromptMessage(role="user", content=text)
        return mcp_types.GetPromptResult(messages=[message], description=params.name)

    async def _list_resources(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        resources = [
            mcp_types.Resource(name="readme", uri=self.readme, mime_type="text/plain"),
            mcp_types.Resource(name="same", uri=SHARED_URI),
        ]
        return mcp_types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: Ctx, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        template = mcp_types.ResourceTemplate(
            name="note", uri_template=f"note://{self.name}/{{id}}"
        )
        return mcp_types.ListResourceTemplatesResult(resource_templates=[template])

    async def _read(
        self, ctx: Ctx, params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        self.asked.append(("resources/read", params.uri))
        content = mcp_types.TextResourceContents(
            uri=params.uri, text=f"{self.name} has {params.uri}", mime_type="text/plain"
        )
        return mcp_types.ReadResourceResult(contents=[content])

    async def _complete(
        self, ctx: Ctx, params: mcp_types.CompleteRequestParams
    ) -> mcp_types.CompleteResult:
        ref = params.ref
        key = ref.name if isinstance(ref, mcp_types.PromptReference) else ref.uri
        self.asked.append(("completion/complete", key))
        values = [v for v in ("Ada", "Alan", "Grace") if v.startswith(params.argument.value)]
        return mcp_types.CompleteResult(completion=mcp_types.Completion(values=values))
