"""What the servers pages show: each upstream server's state (the facts ``pml status``
prints), its stored tools, and for a changed tool the diff against the pinned definition.

    rows = await server_rows(services)               # the list, by name
    tools = tool_views(await services.catalog.stored_tools("time"))
    reason = accept_refusal(viewer.principal, services.deployment)   # None: may accept

Strings an upstream server wrote (errors, names, definitions) are only ever text for the
templates, which escape them; errors are cut to a bounded length and control characters
are shown escaped, as the CLI shows them.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Literal
from urllib.parse import quote

from pml.registry.scope import Principal, Scope
from pml.storage.catalog_repo import StoredTool
from pml.upstream.base import ServerStatus
from pml.web.services import WebServices

MAX_ERROR_SHORT: Final = 240
MAX_ERROR_LONG: Final = 4000
MAX_DIFF_LINES: Final = 600
MAX_DIFF_LINE: Final = 2000
MAX_DEFINITION_TEXT: Final = 40_000

DiffKind = Literal["file", "hunk", "add", "del", "same"]


def printable(text: str, limit: int) -> str:
    """``text`` on display: control characters shown escaped, cut at ``limit`` with "…"."""
    if not text.isprintable():
        text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def path_part(name: str) -> str:
    """``name`` as one URL path segment (every reserved character escaped)."""
    return quote(name, safe="")


@dataclass(frozen=True, slots=True)
class ServerRow:
    """One upstream server as the list shows it."""

    name: str
    state: str
    transport: str
    tool_count: int
    catalog_tools: int
    last_latency_ms: float | None
    last_error: str | None
    last_error_full: str | None
    lazy: bool
    updated_at: datetime | None
    reported_by: str | None
    flagged: tuple[str, ...]

    @property
    def href(self) -> str:
        return f"/ui/servers/{path_part(self.name)}"


def server_row(
    status: ServerStatus, flagged: Sequence[str], catalog_tools: int, lazy: bool
) -> ServerRow:
    """The row of one server: the live (or last reported) state, the stored flags."""
    error = status.last_error
    reporter = status.extra.get("reported_by")
    return ServerRow(
        name=status.name,
        state=status.state,
        transport=status.transport,
        tool_count=status.tool_count,
        catalog_tools=catalog_tools,
        last_latency_ms=status.last_latency_ms,
        last_error=printable(error, MAX_ERROR_SHORT) if error else None,
        last_error_full=printable(error, MAX_ERROR_LONG) if error else None,
        lazy=lazy or status.lazy,
        updated_at=status.updated_at,
        reported_by=reporter if isinstance(reporter, str) else None,
        flagged=tuple(flagged),
    )


async def server_rows(services: WebServices) -> list[ServerRow]:
    """Every server the states report, by name, with the flags ``tool_schema`` holds now."""
    states = await services.servers.states()
    flagged = await services.catalog.flagged()
    counts = await services.catalog.tool_counts()
    configured = services.settings.servers
    rows: list[ServerRow] = []
    for status in states:
        config = configured.get(status.name)
        row = server_row(
            status,
            flagged.get(status.name, ()),
            counts.get(status.name, 0),
            config is not None and config.lazy,
        )
        if config is not None and config.disabled:
            row = replace(row, state="disabled")  # as `pml status` says, whatever was reported
        elif "reported_by" in status.extra and row.reported_by is None:
            row = replace(row, state="never started")  # no gateway has reported it yet
        rows.append(row)
    return sorted(rows, key=lambda row: row.name)


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: DiffKind
    text: str


@dataclass(frozen=True, slots=True)
class ToolView:
    """One stored tool on the server page; a flagged one with its diff."""

    stored: StoredTool
    description: str
    diff: tuple[DiffLine, ...]
    diff_cut: int  # lines not shown
    pinned_lost: bool

    @property
    def changed_back(self) -> bool:
        """Flagged, but the definition is the pinned one again (changed, then changed back)."""
        stored = self.stored
        return stored.flagged and stored.definition_hash == stored.pinned_hash

    @property
    def anchor(self) -> str:
        return "tool-" + path_part(self.stored.name).replace("%", "_")

    @property
    def current_text(self) -> str:
        """The current definition as indented JSON (bounded), when no diff can be shown."""
        text = "\n".join(pretty(self.stored.definition))
        return text if len(text) <= MAX_DEFINITION_TEXT else text[:MAX_DEFINITION_TEXT] + "\n…"

    @property
    def accept_path(self) -> str:
        stored = self.stored
        return f"/ui/servers/{path_part(stored.server)}/tools/{path_part(stored.name)}/accept"


def pretty(definition: Mapping[str, Any]) -> list[str]:
    """A definition as the diff shows it: indented JSON, keys sorted."""
    text = json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False)
    return text.splitlines()


def definition_diff(
    pinned: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[tuple[DiffLine, ...], int]:
    """The unified diff from the pinned to the current definition (bounded), and how many
    lines were left out."""
    lines = list(
        difflib.unified_diff(
            pretty(pinned), pretty(current), "pinned (accepted)", "current", lineterm="", n=3
        )
    )
    shown: list[DiffLine] = []
    for line in lines[:MAX_DIFF_LINES]:
        kind: DiffKind = "same"
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        shown.append(DiffLine(kind, printable(line, MAX_DIFF_LINE)))
    return tuple(shown), max(0, len(lines) - MAX_DIFF_LINES)


def tool_views(stored: Sequence[StoredTool]) -> list[ToolView]:
    """The server page's tools, flagged ones first, then by name."""
    views: list[ToolView] = []
    for tool in stored:
        description = tool.definition.get("description")
        text = printable(description, 600) if isinstance(description, str) else ""
        diff: tuple[DiffLine, ...] = ()
        cut = 0
        lost = tool.flagged and tool.pinned_definition is None
        if tool.flagged and tool.pinned_definition is not None:
            diff, cut = definition_diff(tool.pinned_definition, tool.definition)
        views.append(ToolView(tool, text, diff, cut, lost))
    return sorted(views, key=lambda view: (not view.stored.flagged, view.stored.name))


def accept_refusal(principal: Principal, deployment: Scope) -> str | None:
    """Why this person may not accept upstream definitions (None: they may).

    Upstream servers belong to the deployment, not to a project: only an admin of the
    deployment's own org/project re-pins what every tenant's agents will call."""
    if not principal.is_admin:
        return "Only admins may accept tool definitions."
    if (principal.scope.org, principal.scope.project) != (deployment.org, deployment.project):
        return (
            f"Upstream servers belong to this deployment ({deployment.org}/"
            f"{deployment.project}): only its admins may accept a changed definition; you are "
            f"signed in to {principal.scope.org}/{principal.scope.project}."
        )
    return None
