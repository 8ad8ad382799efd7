"""The audit page: the events ``GET /api/audit`` shows the same key, filtered, paged, live.

    GET /ui/audit?event=POLICY_DENIED&user=erwan&from=2025-06-01T12:00   newest 50, filtered
    GET /ui/audit?...&before_id=4711        the 50 before (Older); after_id=...: Newer
    GET /ui/audit/live?after_id=4790&...    <tr> rows of what came since (X-PML-After-Id)

A page lists its events oldest first, like ``pml audit tail``, so that the live region
(``dashboard.js``) appends new rows where they belong: at the bottom. Only the page that
reaches the newest event follows live. An admin sees every user's events of its
org/project, anyone else only their own (the ``GET /api/audit`` rule); the session's scope
fixes the org and project, so no parameter reaches another tenant. Malformed filters get a
400 page that says what is wrong, with the form to correct them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import InvalidInput
from pml.policy.model import AUDIT_EVENTS
from pml.storage.audit_repo import AuditRepository, AuditRow
from pml.web.dashboard.audit_filters import (
    LIVE_PATH,
    PAGE_PATH,
    AuditFilters,
    parse_filters,
    typed_values,
)
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, with_headers

PAGE_SIZE = 50
LIVE_BATCH = 200
LIVE_INTERVAL_MS = 2000
DETAILS_SHORT = 160
DETAILS_LONG = 4000
AFTER_ID_HEADER = "X-PML-After-Id"
_NAME_BREAKS = re.compile(r"(?<=[:./])")  # server:tool, org.project.ns.action.hash
_WORD_BREAKS = re.compile(r"(?<=[:_])")  # EXECUTOR_RESPONSE, heuristic:file_read
# Well-known event names, offered as suggestions in the form (any name may be typed).
KNOWN_EVENTS = AUDIT_EVENTS


@dataclass(frozen=True, slots=True)
class ShownEvent:
    """One row of the table, ready to print (the template escapes every value)."""

    id: int
    iso: str
    date: str
    time: str
    event: str
    event_pieces: list[str]
    tone: str
    actor: str
    tool: list[str]  # in pieces: a line may wrap after each
    capability: list[str]
    decided_by: list[str]
    request_id: str
    request_link: str
    details: str
    details_full: str
    details_size: int
    folded: bool  # too long for the row: the whole text unfolds below it
    cut: bool  # too long even unfolded


def _tone(event: str) -> str:
    if "DENIED" in event or "FAILED" in event or "DROPPED" in event or "REVOKED" in event:
        return "bad"
    if "GRANTED" in event or event.startswith("CAPABILITY_"):
        return "good"
    if event.startswith("APPROVAL_"):
        return "ask"
    return "plain"


def _pieces(text: str, breaks: re.Pattern[str] = _NAME_BREAKS) -> list[str]:
    return [piece for piece in breaks.split(text) if piece]


def _json(details: dict[str, Any]) -> str:
    return json.dumps(details, ensure_ascii=False, separators=(",", ":"), default=str)


def shown(row: AuditRow) -> ShownEvent:
    """A stored event as the table shows it: UTC time, compact JSON cut to size."""
    stamp = row.ts.strftime("%Y-%m-%d %H:%M:%S")
    text = _json(row.details)
    request_id = row.request_id or ""
    return ShownEvent(
        id=row.id,
        iso=row.to_dict()["ts"],
        date=stamp[:10],
        time=stamp[11:],
        event=row.event,
        event_pieces=_pieces(row.event, _WORD_BREAKS),
        tone=_tone(row.event),
        actor=row.actor or "",
        tool=_pieces(row.tool or ""),
        capability=_pieces(row.capability or ""),
        decided_by=_pieces(row.decided_by or "", _WORD_BREAKS),
        request_id=request_id,
        request_link=f"{PAGE_PATH}?{urlencode({'request_id': request_id})}",
        details=text if len(text) <= DETAILS_SHORT else text[: DETAILS_SHORT - 1] + "…",
        details_full=text if len(text) <= DETAILS_LONG else text[: DETAILS_LONG - 1] + "…",
        details_size=len(text),
        folded=len(text) > DETAILS_SHORT,
        cut=len(text) > DETAILS_LONG,
    )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of events (oldest first) and where the pager leads."""

    rows: list[AuditRow]
    older: str | None
    newer: str | None
    newest: bool  # this page reaches the newest matching event: it may follow live


def _actor(viewer: Viewer) -> str | None:
    """Whose events the viewer may see: everyone's (admin) or only their own."""
    return None if viewer.principal.is_admin else viewer.scope.user


class AuditPages:
    """The audit page's reads, over the same table ``GET /api/audit`` reads."""

    def __init__(self, repo: AuditRepository) -> None:
        self.repo = repo

    async def _search(
        self, viewer: Viewer, filters: AuditFilters, limit: int, **cursor: int | None
    ) -> list[AuditRow]:
        actor = _actor(viewer)
        if actor is not None and filters.text.get("user", actor) != actor:
            return []  # another user's events: never shown to a non-admin
        scope = viewer.scope
        return await self.repo.search(
            org=scope.org,
            project=scope.project,
            limit=limit,
            where=filters.query(actor=actor),
            **cursor,
        )

    async def page(self, viewer: Viewer, filters: AuditFilters) -> Page:
        """The page ``filters`` asks for: the newest, or before/after a cursor."""
        after, before = filters.after_id, filters.before_id
        rows = await self._search(viewer, filters, PAGE_SIZE + 1, before_id=before, after_id=after)
        more = len(rows) > PAGE_SIZE  # one more than a page: there is another beyond
        if after is not None:
            rows = rows[:PAGE_SIZE]
            has_older, has_newer = True, more
        else:
            rows = rows[-PAGE_SIZE:]
            has_older, has_newer = more, before is not None
        if not rows:
            return Page([], None, None, newest=not has_newer)
        older = filters.link(before_id=rows[0].id) if has_older else None
        newer = filters.link(after_id=rows[-1].id) if has_newer else None
        return Page(rows, older, newer, newest=not has_newer)

    async def since(self, viewer: Viewer, filters: AuditFilters) -> list[AuditRow]:
        """What came after the live region's ``after_id`` (oldest first)."""
        return await self._search(viewer, filters, LIVE_BATCH, after_id=filters.after_id or 0)


def routes(ui: Ui) -> list[Route]:
    """The page's routes."""
    pages = AuditPages(AuditRepository(ui.services.db))

    async def page(request: Request, viewer: Viewer) -> Response:
        context: dict[str, Any] = {
            "known_events": KNOWN_EVENTS,
            "page_path": PAGE_PATH,
            "interval": LIVE_INTERVAL_MS,
            "page_size": PAGE_SIZE,
            "is_admin": viewer.principal.is_admin,
        }
        try:
            filters = parse_filters(request.query_params)
        except InvalidInput as error:
            typed = typed_values(request.query_params)
            return await ui.render(
                request,
                viewer,
                "audit.html",
                status=400,
                error=error.message,
                error_field=error.data.get("field"),
                typed=typed,
                **context,
            )
        found = await pages.page(viewer, filters)
        last = found.rows[-1].id if found.rows else filters.after_id or 0
        return await ui.render(
            request,
            viewer,
            "audit.html",
            filters=filters,
            typed=dict(filters.params()),
            page=found,
            rows=[shown(row) for row in found.rows],
            live_url=filters.link(LIVE_PATH),
            after_id=last,
            newest_link=filters.link(),
            **context,
        )

    async def live(request: Request, viewer: Viewer) -> Response:
        filters = parse_filters(request.query_params, cursors=("after_id",))
        if filters.after_id is None:
            raise InvalidInput("Give after_id: the newest event id shown.", field="after_id")
        rows = await pages.since(viewer, filters)
        response = ui.fragment("audit_rows.html", rows=[shown(row) for row in rows])
        response.headers[AFTER_ID_HEADER] = str(rows[-1].id if rows else filters.after_id)
        return with_headers(response)

    return [
        Route(PAGE_PATH, ui.page(page), methods=["GET"]),
        Route(LIVE_PATH, ui.page(live), methods=["GET"]),
    ]
