"""``prompts/list``, ``prompts/get`` and ``completion/complete`` through the gateway.

    prompts = PromptSurface(catalog, pool, edge)
    Server(..., on_list_prompts=prompts.list_prompts, on_get_prompt=prompts.get_prompt,
           on_completion=prompts.complete)

Every running server's prompts are listed as ``<server>__<prompt>``; ``prompts/get`` goes to
that server with the prompt's own name, and is audited (``PROMPT_GET``). A completion goes to
the server of the prompt or resource template it refers to.
"""

from __future__ import annotations

import mcp_types
from mcp.shared.exceptions import MCPError

from pml.gateway.notify import Context
from pml.gateway.surface_catalog import SurfaceCatalog, prompt_view
from pml.gateway.surface_edge import SurfaceEdge, translating
from pml.upstream.base import UpstreamPool

NO_COMPLETION = mcp_types.CompleteResult(completion=mcp_types.Completion(values=[]))


def refuse_cursor(params: mcp_types.PaginatedRequestParams | None) -> None:
    """Listings come in one page: any cursor is one the gateway never handed out."""
    if params is not None and params.cursor is not None:
        raise MCPError(
            mcp_types.INVALID_PARAMS,
            "Invalid cursor: this listing has a single page (no nextCursor was given)",
        )


class PromptSurface:
    """The prompt and completion handlers of the gateway's MCP server."""

    def __init__(self, catalog: SurfaceCatalog, pool: UpstreamPool, edge: SurfaceEdge) -> None:
        self._catalog = catalog
        self._pool = pool
        self._edge = edge

    async def list_prompts(
        self, ctx: Context, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListPromptsResult:
        """Every running server's prompts, named ``server__prompt``."""
        self._edge.caller(ctx)
        refuse_cursor(params)
        prompts = [
            prompt_view(server, item)
            for server, item in await self._catalog.items("prompts")
            if isinstance(item, mcp_types.Prompt)
        ]
        return mcp_types.ListPromptsResult(prompts=prompts)

    async def get_prompt(
        self, ctx: Context, params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        """The prompt from its server (arguments passed on as given)."""
        scope = self._edge.caller(ctx)
        with translating():
            server, prompt = await self._catalog.prompt_target(params.name)
        arguments = dict(params.arguments) if params.arguments is not None else None
        details: dict[str, object] = {"server": server, "prompt": prompt, "success": False}
        if arguments:
            details["arguments"] = arguments
        try:
            async with self._edge.upstream(server), self._pool.session(server) as client:
                result = await client.get_prompt(prompt, arguments)
            details["success"] = True
        finally:
            self._edge.audit(ctx, scope, "PROMPT_GET", details)
        return result

    async def complete(
        self, ctx: Context, params: mcp_types.CompleteRequestParams
    ) -> mcp_types.CompleteResult:
        """Completions from the server of the prompt or template ``params.ref`` names."""
        self._edge.caller(ctx)
        ref = params.ref
        upstream_ref: mcp_types.PromptReference | mcp_types.ResourceTemplateReference
        with translating():
            if isinstance(ref, mcp_types.PromptReference):
                server, name = await self._catalog.prompt_target(ref.name)
                upstream_ref = mcp_types.PromptReference(name=name)
            else:
                server, template = await self._catalog.template_target(ref.uri)
                upstream_ref = mcp_types.ResourceTemplateReference(uri=template)
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        async with self._edge.upstream(server), self._pool.session(server) as client:
            if client.server_capabilities.completions is None:
                return NO_COMPLETION
            return await client.complete(upstream_ref, argument, context_arguments=context)
