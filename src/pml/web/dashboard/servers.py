"""The servers page (placeholder until built)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui


def routes(ui: Ui) -> list[Route]:
    """The page's routes."""

    async def page(request: Request, viewer: Viewer) -> Response:
        return await ui.render(request, viewer, "placeholder.html", title="servers")

    return [Route("/ui/servers", ui.page(page), methods=["GET"])]
