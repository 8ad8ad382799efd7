"""The usage page (SPEC §12): the last 30 days of calls of the viewer's org/project as
charts and tables, and the live permission grants with a button to revoke each.

    GET  /ui/usage                                 charts, tables, grants
    POST /ui/usage/grants/{grant_id}/revoke        revoke one grant of the viewer's org/project

Revoking goes through ``GrantService.revoke`` (which audits ``PERMISSION_REVOKED`` and tells
running gateways at once), so the next call the grant covered asks a person again. A grant
of another org or project is not found, whatever its id.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import NotFound
from pml.registry.fqdn import message_value
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, redirect
from pml.web.dashboard.usage_view import DAYS, grant_rows, usage_page, when

GRANTS_ANCHOR = "grants"
SHORT_ID = re.compile(r"[0-9a-f-]{1,8}")  # how a revoked grant is named back to the page


def routes(ui: Ui) -> list[Route]:
    """The page's routes."""
    services = ui.services

    async def page(request: Request, viewer: Viewer) -> Response:
        revoked = request.query_params.get("revoked", "")
        notice = None
        if SHORT_ID.fullmatch(revoked):
            notice = f"Revoked grant {revoked}: the calls it covered ask a person again."
        return await ui.render(
            request,
            viewer,
            "usage.html",
            usage=await usage_page(services, viewer.scope),
            grants=await grant_rows(services, viewer.scope),
            days=DAYS,
            when=when,
            notice=notice,
        )

    async def revoke(request: Request, viewer: Viewer) -> Response:
        grant_id = str(request.path_params["grant_id"])
        grant = await services.grants.get(viewer.scope, grant_id)
        if grant is None:
            raise NotFound(f"Grant not found: {message_value(grant_id, 60)}")
        if not grant.revoked:  # revoked in another tab: the audit keeps the first revocation
            await services.grants.revoke(viewer.scope, grant.id, decided_by=viewer.decided_by)
        return redirect(f"/ui/usage?revoked={quote(grant.id[:8], safe='')}#{GRANTS_ANCHOR}")

    return [
        Route("/ui/usage", ui.page(page), methods=["GET"]),
        Route("/ui/usage/grants/{grant_id}/revoke", ui.action(revoke), methods=["POST"]),
    ]
