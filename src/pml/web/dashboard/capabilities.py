"""The capabilities pages (SPEC §12): the listing and search here, one capability's page in
``capability_detail``.

    GET /ui/capabilities?visibility=project&named_only=1&sort_by=name&limit=50&offset=50
    GET /ui/capabilities?q=read+a+json+file          # ranked as pml_discover ranks them
    GET /ui/capabilities?archived=1                   # the archived ones (names only)

The listing is ``cap_list`` (``CapTools.list``) for the viewer's scope, exactly what
``GET /api/capabilities`` answers the same key. A search ranks with the discovery service
(``pml_discover``'s ranking, capabilities only); without one it falls back to a name
pattern and says so. The "Archived" view lists the archived capabilities (a search there
matches names: they are not in the discovery index); deprecated ones carry a mark. The
query string is read strictly: an unknown, repeated, overlong or
malformed parameter, or one with control characters, is a 400 page saying which and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import InvalidInput
from pml.registry.models import ListQuery
from pml.registry.patterns import glob_to_like
from pml.registry.scope import VISIBILITIES, Scope, Visibility
from pml.registry.tools import CapTools, summary
from pml.storage.capability_repo import find_visible
from pml.web.dashboard import capability_detail
from pml.web.dashboard.capability_format import (
    BASE_PATH,
    VISIBILITY_HELP,
    ListRow,
    row_of,
)
from pml.web.dashboard.capability_lifecycle import Mark, marks_of
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui
from pml.web.services import WebServices

SortBy = Literal["usage", "name", "created"]
SORTS: Final[dict[SortBy, str]] = {
    "usage": "Most used",
    "name": "Name",
    "created": "Newest",
}
PARAMETERS: Final = ("q", "visibility", "named_only", "sort_by", "limit", "offset", "archived")
NOTICES: Final = {"purged": "Purged: the capability and its whole history were deleted."}
MAX_QUERY: Final = 200
MAX_VALUE: Final = 32
MAX_LIMIT: Final = 200
MAX_OFFSET: Final = 10_000_000
PAGE_SIZE: Final = 50  # cap_list's default: page one is what the API answers by default
SEARCH_LIMIT: Final = 50  # pml_discover's maximum
TRUE: Final = frozenset({"1", "true", "on"})
FALSE: Final = frozenset({"", "0", "false", "off"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DIGITS = re.compile(r"[0-9]{1,9}")
_GLOB = re.compile(r"[*?]")


@dataclass(frozen=True, slots=True)
class Filters:
    """What the listing shows: a search, filters, order and page (already checked)."""

    q: str = ""
    visibility: Visibility | None = None
    named_only: bool = False
    sort_by: SortBy = "usage"
    limit: int = PAGE_SIZE
    offset: int = 0
    archived: bool = False

    def list_arguments(self) -> dict[str, Any]:
        """The ``cap_list`` arguments of these filters (no search)."""
        arguments: dict[str, Any] = {
            "named_only": self.named_only,
            "sort_by": self.sort_by,
            "limit": self.limit,
            "offset": self.offset,
        }
        if self.visibility is not None:
            arguments["visibility"] = self.visibility
        return arguments

    def href(self, **changes: Any) -> str:
        """This listing's URL with ``changes``, defaults left out."""
        target = replace(self, **changes)
        default = Filters()
        values = {
            name: getattr(target, name)
            for name in PARAMETERS
            if getattr(target, name) != getattr(default, name)
        }
        for flag in ("named_only", "archived"):
            if values.get(flag) is True:
                values[flag] = "1"
        return f"{BASE_PATH}?{urlencode(values)}" if values else BASE_PATH


def _one(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise InvalidInput(f"Give {name} at most once.", field=name)
    return values[0] if values else None


def _number(name: str, text: str, low: int, high: int) -> int:
    if _DIGITS.fullmatch(text) is None or not low <= int(text) <= high:
        raise InvalidInput(
            f"{name} must be a whole number from {low} to {high:,}, written in digits.",
            field=name,
        )
    return int(text)


def parse_filters(params: QueryParams) -> Filters:
    """The listing's filters from a query string, or ``INVALID_INPUT`` saying what is wrong.

    Empty values mean "not given" (a submitted form sends every field)."""
    unknown = sorted(set(params.keys()) - set(PARAMETERS))
    if unknown:
        raise InvalidInput(
            f"Unknown parameter {unknown[0][:40]!r}. This page takes {', '.join(PARAMETERS)}.",
            field=unknown[0][:40],
        )
    found: dict[str, str] = {}
    for name in PARAMETERS:
        value = _one(params, name)
        if value is None:
            continue
        limit = MAX_QUERY if name == "q" else MAX_VALUE
        if len(value) > limit:
            raise InvalidInput(f"{name} is too long (at most {limit} characters).", field=name)
        if _CONTROL.search(value) is not None:
            raise InvalidInput(f"{name} must not contain control characters.", field=name)
        found[name] = value.strip()
    filters = Filters(q=found.get("q", ""))
    visibility = found.get("visibility", "")
    if visibility:
        if visibility not in VISIBILITIES:
            raise InvalidInput(
                f"visibility must be one of {', '.join(VISIBILITIES)} (or empty for any).",
                field="visibility",
            )
        filters = replace(filters, visibility=visibility)
    named = found.get("named_only", "").lower()
    archived = found.get("archived", "").lower()
    for name, value in (("named_only", named), ("archived", archived)):
        if value not in TRUE | FALSE:
            raise InvalidInput(f"{name} must be 1 or 0 (true or false).", field=name)
    sort_by = found.get("sort_by", "") or "usage"
    if sort_by not in SORTS:
        raise InvalidInput(f"sort_by must be one of {', '.join(SORTS)}.", field="sort_by")
    return replace(
        filters,
        named_only=named in TRUE,
        archived=archived in TRUE,
        sort_by=sort_by,
        limit=_number("limit", found["limit"], 1, MAX_LIMIT) if found.get("limit") else PAGE_SIZE,
        offset=_number("offset", found["offset"], 0, MAX_OFFSET) if found.get("offset") else 0,
    )


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of rows, how many there are in all, and how they were found."""

    rows: list[ListRow]
    total: int
    mode: Literal["list", "search", "names"]
    pattern: str | None = None
    marks: dict[str, Mark] = field(default_factory=dict[str, Mark])


def name_pattern(q: str) -> str:
    """The display-name glob a search falls back to: its words in order, anything between."""
    if _GLOB.search(q) is not None:
        return q
    return "*" + "*".join(q.split()) + "*"


async def archived_listing(services: WebServices, scope: Scope, f: Filters) -> Listing:
    """The archived capabilities ``scope`` may see (``cap_list``'s filters; names only)."""
    pattern = name_pattern(f.q) if f.q else None
    query = ListQuery(
        like_pattern=glob_to_like(pattern) if pattern is not None else None,
        named_only=f.named_only,
        visibility=f.visibility,
        sort_by=f.sort_by,
        descending=f.sort_by != "name",
        limit=f.limit,
        offset=f.offset,
        archived=True,
    )
    page = await services.registry.list(scope, query)
    items = [summary(record) for record in page.items]
    marks = await marks_of(services.db, scope, items)
    mode = "names" if pattern is not None else "list"
    return Listing([row_of(item) for item in items], page.total, mode, pattern, marks)


async def listing(services: WebServices, tools: CapTools, scope: Scope, f: Filters) -> Listing:
    """What the page shows for ``f``: ``cap_list``, or a search ranked as ``pml_discover``."""
    if f.archived:
        return await archived_listing(services, scope, f)
    if not f.q:
        page = await tools.list(scope, f.list_arguments())
        items = page["items"]
        marks = await marks_of(services.db, scope, items)
        return Listing([row_of(item) for item in items], int(page["total"]), "list", None, marks)
    discovery = services.discovery
    if discovery is None:
        pattern = name_pattern(f.q)
        page = await tools.list(scope, {**f.list_arguments(), "pattern": pattern})
        items = page["items"]
        marks = await marks_of(services.db, scope, items)
        rows = [row_of(item) for item in items]
        return Listing(rows, int(page["total"]), "names", pattern, marks)
    hits = await discovery.rank(scope, f.q, kind="capability", limit=SEARCH_LIMIT)
    ranked = [hit["fqdn"] for hit in hits if isinstance(hit.get("fqdn"), str)]
    # The registry decides what this scope sees, as for every other read (one query); a
    # capability archived or hidden since the index last looked is left out.
    records = await find_visible(services.db, scope, ranked)
    scores = {hit.get("fqdn"): hit.get("score") for hit in hits}
    rows: list[ListRow] = []
    shown: list[dict[str, Any]] = []
    for fqdn in ranked:
        record = records.get(fqdn)
        if record is None:
            continue
        if f.visibility is not None and record.visibility != f.visibility:
            continue
        if f.named_only and not record.named:
            continue
        shown.append(summary(record))
        rows.append(row_of(shown[-1], score=scores.get(fqdn)))
    page_rows = rows[f.offset : f.offset + f.limit]
    marks = await marks_of(services.db, scope, shown[f.offset : f.offset + f.limit])
    return Listing(page_rows, len(rows), "search", None, marks)


def _without_notice(params: QueryParams) -> tuple[QueryParams, str | None]:
    """The query string without ``notice`` (set by the redirect after a purge), and its text."""
    values = params.getlist("notice")
    if not values:
        return params, None
    if len(values) > 1 or values[0] not in NOTICES:
        raise InvalidInput(f"notice must be one of {', '.join(NOTICES)}.", field="notice")
    rest = [(key, value) for key, value in params.multi_items() if key != "notice"]
    return QueryParams(rest), NOTICES[values[0]]


def routes(ui: Ui) -> list[Route]:
    """The listing, a capability's page and its actions."""
    tools = CapTools(ui.services.registry)

    async def page(request: Request, viewer: Viewer) -> Response:
        context: dict[str, Any] = {
            "sorts": SORTS,
            "visibilities": VISIBILITY_HELP,
            "max_query": MAX_QUERY,
            "notice": None,
        }
        try:
            params, notice = _without_notice(request.query_params)
            context["notice"] = notice
            filters = parse_filters(params)
        except InvalidInput as error:
            return await ui.render(
                request,
                viewer,
                "capabilities.html",
                status=400,
                error=error.message,
                filters=Filters(),
                found=None,
                **context,
            )
        found = await listing(ui.services, tools, viewer.scope, filters)
        end = filters.offset + len(found.rows)
        return await ui.render(
            request,
            viewer,
            "capabilities.html",
            filters=filters,
            found=found,
            first=filters.offset + 1 if found.rows else 0,
            last=end,
            previous_href=filters.href(offset=max(0, filters.offset - filters.limit))
            if filters.offset > 0
            else None,
            next_href=filters.href(offset=end) if end < found.total else None,
            **context,
        )

    return [
        Route(BASE_PATH, ui.page(page), methods=["GET"]),
        *capability_detail.routes(ui, tools),
    ]
