"""The servers pages (SPEC §12): each upstream server's state, its tools, definition drift.

    GET  /ui/servers                                   states, tool counts, flagged tools
    GET  /ui/servers/{server}                          its stored tools; a diff per changed one
    POST /ui/servers/{server}/tools/{tool}/accept      pin the current definition (audited)

The states are the running pool's (or, under ``pml dashboard``, the last a gateway
reported), the facts ``pml status`` prints; whether a definition changed is read from the
catalog (``tool_schema``) at every view. Upstream servers belong to the deployment, so only
an admin of the deployment's own org/project may accept a changed definition; the person
accepts the very definition they were shown (its hash travels with the form), never one
that changed after they looked.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import Forbidden, InvalidInput, NotFound
from pml.registry.fqdn import message_value
from pml.web.dashboard.servers_view import (
    MAX_ERROR_SHORT,
    accept_refusal,
    path_part,
    printable,
    server_rows,
    tool_views,
)
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, form, redirect

ACCEPTED_EVENT = "TOOL_DEFINITION_ACCEPTED"
HASH_LENGTH = 64


def routes(ui: Ui) -> list[Route]:
    """The page's routes."""
    services = ui.services
    catalog = services.catalog

    async def servers(request: Request, viewer: Viewer) -> Response:
        rows = await server_rows(services)
        return await ui.render(
            request,
            viewer,
            "servers.html",
            rows=rows,
            flagged_total=sum(len(row.flagged) for row in rows),
            refusal=accept_refusal(viewer.principal, services.deployment),
            deployment=services.deployment,
        )

    async def server_page(
        request: Request,
        viewer: Viewer,
        server: str,
        *,
        notice: str | None = None,
        problem: str | None = None,
        status: int = 200,
    ) -> Response:
        row = next((row for row in await server_rows(services) if row.name == server), None)
        stored = await catalog.stored_tools(server)
        if row is None and not stored:
            raise NotFound(f"No upstream server named {message_value(printable(server, 200))}")
        return await ui.render(
            request,
            viewer,
            "server.html",
            status=status,
            server=server,
            row=row,
            tools=tool_views(stored),
            refusal=accept_refusal(viewer.principal, services.deployment),
            deployment=services.deployment,
            notice=notice,
            problem=problem,
        )

    async def server(request: Request, viewer: Viewer) -> Response:
        name = str(request.path_params["server"])
        accepted = request.query_params.get("accepted", "")
        notice = None
        prefix = f"{name}:"
        if accepted.startswith(prefix):  # only about a tool of this server that is pinned now
            tool = await catalog.stored_tool(name, accepted[len(prefix) :])
            if tool is not None and not tool.flagged:
                notice = (
                    f"Accepted the new definition of {printable(tool.address, MAX_ERROR_SHORT)}: "
                    "it is pinned, and the audit log records who accepted it."
                )
        return await server_page(request, viewer, name, notice=notice)

    async def accept(request: Request, viewer: Viewer) -> Response:
        server, tool = str(request.path_params["server"]), str(request.path_params["tool"])
        refusal = accept_refusal(viewer.principal, services.deployment)
        if refusal is not None:
            raise Forbidden(refusal)
        stored = await catalog.stored_tool(server, tool)
        if stored is None:
            shown = message_value(printable(f"{server}:{tool}", 300))
            raise NotFound(f"No stored upstream tool {shown}")
        seen = form(request).get("definition_hash", "")
        if len(seen) != HASH_LENGTH:
            raise InvalidInput("Reload the page: the form lacks the definition it accepts.")
        back = f"/ui/servers/{path_part(server)}"
        if not stored.flagged:
            return redirect(back)  # already pinned (accepted in another tab): nothing to do
        changed_again = (
            "This tool's definition changed again after the page was loaded; nothing was "
            "accepted. Review the new difference below."
        )
        if seen != stored.definition_hash or not await catalog.accept(
            server, tool, expected_hash=seen
        ):
            return await server_page(request, viewer, server, problem=changed_again, status=409)
        services.audit.emit(
            ACCEPTED_EVENT,
            scope=viewer.scope,
            details={
                "tool": stored.address,
                "server": server,
                "previous_pinned_hash": stored.pinned_hash,
                "accepted_hash": stored.definition_hash,
            },
            decided_by=viewer.decided_by,
        )
        return redirect(f"{back}?accepted={quote(stored.address, safe='')}")

    return [
        Route("/ui/servers", ui.page(servers), methods=["GET"]),
        Route("/ui/servers/{server}", ui.page(server), methods=["GET"]),
        Route("/ui/servers/{server}/tools/{tool:path}/accept", ui.action(accept), methods=["POST"]),
    ]
