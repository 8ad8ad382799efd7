"""One capability's page and its three changes: rename, visibility, description (its
lifecycle forms, archive to purge, are in ``capability_lifecycle``).

    GET  /ui/capabilities/acme.webapp.fs.read_json.a7f3
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/rename        new_name=fs:load_json
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/visibility    visibility=org
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/description   description=...

The page reads what ``cap_whois`` and ``cap_history`` answer (``CapTools``), so a capability
the viewer's scope cannot see is a 404 here as it is a ``NOT_FOUND`` there. Changes go
through ``CapTools.rename`` — the code of ``cap_rename`` — so validation, errors, the alias
left by a rename and the ``tools/list_changed`` it sends are the MCP tool's. A refused
change shows the page again with the error and a 4xx status; nothing was changed. An
archived capability's page (reached by FQDN) says so, shows its versions and offers only
restore and purge.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import InvalidInput, NotFound, PmlError
from pml.registry.fqdn import Fqdn
from pml.registry.tools import CapTools
from pml.storage.dashboard_usage_repo import DayCount, calls_per_day, intents_of
from pml.storage.usage_repo import CAPABILITY_SERVER_ID
from pml.web.dashboard import capability_lifecycle
from pml.web.dashboard.capability_format import (
    BASE_PATH,
    VISIBILITY_HELP,
    Moment,
    detail_href,
    percent,
    when,
)
from pml.web.dashboard.capability_lifecycle import Blocked, archived_history, lifecycle_of
from pml.web.dashboard.charts import bar_chart
from pml.web.dashboard.code_view import DiffLine, code_html, diff_lines, json_html
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, form, redirect

logger = logging.getLogger(__name__)

USAGE_DAYS: Final = 30
MAX_INTENTS: Final = 20
MAX_VERSIONS: Final = 50
MAX_FQDN_PATH: Final = 400
# Which form field each change posts, and what the page says once it is done.
CHANGES: Final = {
    "rename": "new_name",
    "visibility": "visibility",
    "description": "description",
}
NOTICES: Final = {
    "renamed": "Renamed. The old name still works as an alias, and connected MCP clients "
    "were told that their tool list changed.",
    "visibility": "Visibility changed.",
    "description": "Description saved.",
    **capability_lifecycle.NOTICES,
}
NOTICE_OF: Final = {"rename": "renamed", "visibility": "visibility", "description": "description"}
STATUS_OF: Final = {
    "NAME_TAKEN": 409,
    "NAME_COLLISION": 409,
    "INVALID_NAME": 400,
    "INVALID_INPUT": 400,
    "PERMISSION_DENIED": 403,
    "FORBIDDEN": 403,
}
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def checked_fqdn(raw: object) -> str:
    """The FQDN of a page's path, or ``INVALID_INPUT`` (a value with control characters or
    of absurd length is not repeated back)."""
    if not isinstance(raw, str) or len(raw) > MAX_FQDN_PATH or _UNSAFE.search(raw):
        raise InvalidInput("This is not a capability address (org.project.namespace.action.hash).")
    return str(Fqdn.parse(raw))


def checked_notice(request: Request) -> str | None:
    """The page's only query parameter, ``notice`` (set by the redirect after a change)."""
    params = request.query_params
    unknown = sorted(set(params.keys()) - {"notice"})
    if unknown:
        raise InvalidInput(f"Unknown parameter {unknown[0][:40]!r}. This page takes notice.")
    values = params.getlist("notice")
    if not values:
        return None
    if len(values) > 1 or values[0] not in NOTICES:
        raise InvalidInput(f"notice must be one of {', '.join(NOTICES)}.")
    return NOTICES[values[0]]


@dataclass(frozen=True, slots=True)
class IntentView:
    """An intent the capability was learned from or run for (``runs``: how many times)."""

    text: str
    runs: int | None
    last_seen: Moment | None


def remembered_intents(whois: Mapping[str, Any]) -> list[IntentView]:
    """``cap_whois``'s remembered intents (scrubbed, one per meaning, newest first), each
    with how many times it was asked for."""
    entries: Sequence[Mapping[str, Any]] = whois.get("intents") or []
    return [
        IntentView(str(entry["text"]), int(entry["uses"]), when(entry.get("last_seen_at")))
        for entry in entries
    ]


@dataclass(frozen=True, slots=True)
class VersionView:
    """One version and the lines of its diff to the one before."""

    version: int
    tag: str | None
    updated_at: Moment | None
    updated_by: str
    summary: str
    diff: list[DiffLine]
    first: bool


def versions_of(history: Mapping[str, Any]) -> list[VersionView]:
    """``cap_history``'s versions (newest first) as the page lists them."""
    entries: Sequence[Mapping[str, Any]] = history.get("versions", [])
    return [
        VersionView(
            version=int(entry["version"]),
            tag=entry.get("version_tag"),
            updated_at=when(entry.get("updated_at")),
            updated_by=str(entry.get("updated_by") or ""),
            summary=str(entry.get("change_summary") or ""),
            diff=diff_lines(str(entry.get("diff") or "")),
            first=index == len(entries) - 1,
        )
        for index, entry in enumerate(entries)
    ][:MAX_VERSIONS]


def usage_chart(days: Sequence[DayCount]) -> Markup:
    """Calls per day as bars, failed calls drawn over them."""
    return bar_chart(
        [(day.day.isoformat(), float(day.calls)) for day in days],
        title=f"Calls per day, last {len(days)} days",
        unit="calls",
        secondary=[float(day.errors) for day in days],
        secondary_label="failed",
    )


def routes(ui: Ui, tools: CapTools) -> list[Route]:
    """The page of one capability and the posts that change it."""
    db = ui.services.db

    async def show(
        request: Request,
        viewer: Viewer,
        fqdn: str,
        *,
        notice: str | None = None,
        error: PmlError | None = None,
        status: int = 200,
        attempted: Mapping[str, str] | None = None,
        blocked: Blocked | None = None,
        confirm_purge: bool = False,
    ) -> Response:
        scope = viewer.scope
        whois = await tools.whois(scope, {"fqdn": fqdn})  # NOT_FOUND: the page is a 404
        if whois.get("archived"):  # no name resolves to it: its versions are read by FQDN
            history = await archived_history(db, scope, whois)
        else:
            history = await tools.history(scope, {"name": fqdn})
        days = await calls_per_day(
            db,
            scope.org,
            scope.project,
            server_id=CAPABILITY_SERVER_ID,
            tool_name=fqdn,
            days=USAGE_DAYS,
        )
        intents = remembered_intents(whois)
        if not intents:  # learned before intents were remembered: what its traces say
            seen = await intents_of(db, scope.org, scope.project, fqdn, limit=MAX_INTENTS)
            intents = [IntentView(s.intent, s.runs, when(s.last_seen)) for s in seen]
        learned = whois.get("intent")
        if learned and all(intent.text != learned for intent in intents):
            intents.append(IntentView(str(learned), None, None))
        code = whois.get("code")
        return await ui.render(
            request,
            viewer,
            "capability.html",
            status=status,
            cap=whois,
            href=detail_href(fqdn),
            owned=(whois["org"], whois["project"]) == (scope.org, scope.project),
            code_html=code_html(code) if isinstance(code, str) else None,
            schema_html=json_html(whois.get("parameters_schema", {})),
            intents=intents,
            aliases=[(a["alias"], when(a["created_at"])) for a in whois.get("aliases", [])],
            versions=versions_of(history),
            life=await lifecycle_of(db, scope, whois, history.get("versions", [])),
            blocked=blocked,
            confirm_purge=confirm_purge,
            is_admin=viewer.principal.is_admin,
            version_count=whois.get("version_count", 0),
            days=days,
            busy_days=[day for day in reversed(days) if day.calls],
            total_calls=sum(day.calls for day in days),
            chart=usage_chart(days),
            usage_days=USAGE_DAYS,
            calls=whois.get("tool_usage"),
            success=percent(whois.get("success_rate")) if whois.get("usage_count") else "–",
            last_used=when(whois.get("last_used_at")),
            created=when(whois.get("created_at")),
            updated=when(whois.get("updated_at")),
            visibilities=VISIBILITY_HELP,
            notice=notice,
            error=error,
            attempted=attempted or {},
        )

    async def detail(request: Request, viewer: Viewer) -> Response:
        fqdn = checked_fqdn(request.path_params["fqdn"])
        return await show(request, viewer, fqdn, notice=checked_notice(request))

    def change(kind: str) -> Route:
        field = CHANGES[kind]

        async def post(request: Request, viewer: Viewer) -> Response:
            fqdn = checked_fqdn(request.path_params["fqdn"])
            values = form(request)
            extra = sorted(set(values) - {"csrf", field})
            if extra or field not in values:
                problem = f"unexpected field {extra[0][:40]!r}" if extra else f"{field} is missing"
                error = InvalidInput(f"This form is not one this page sends: {problem}.")
                return await show(request, viewer, fqdn, error=error, status=400)
            value = values[field].strip() if field == "new_name" else values[field]
            try:
                await tools.rename(viewer.scope, {"name": fqdn, field: value})
            except NotFound:
                raise  # not visible to this scope: a 404 page, as for a GET
            except PmlError as error:
                status = STATUS_OF.get(error.code)
                if status is None:
                    raise
                logger.info("dashboard %s of %s refused: %s", kind, fqdn, error.code)
                return await show(
                    request, viewer, fqdn, error=error, status=status, attempted={field: value}
                )
            return redirect(f"{detail_href(fqdn)}?notice={NOTICE_OF[kind]}")

        return Route(f"{BASE_PATH}/{{fqdn:path}}/{kind}", ui.action(post), methods=["POST"])

    return [
        *(change(kind) for kind in CHANGES),
        *capability_lifecycle.routes(ui, show, checked_fqdn),
        # ``path``: a value with a slash gets this page's 400, not a bare 404
        Route(f"{BASE_PATH}/{{fqdn:path}}", ui.page(detail), methods=["GET"]),
    ]
