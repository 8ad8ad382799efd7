"""The approvals page (SPEC §10.5, §12): what waits for a person, and their decision.

    GET  /ui/approvals                     the viewer's org/project's approvals (a live list)
    GET  /ui/approvals/live                that list alone, polled every 1.5 s by the page
    GET  /ui/approvals/wf_3f2a...          one approval in full
    POST /ui/approvals/wf_3f2a.../decide   decision=once|session|always|deny  -> 303 back

Everything comes from the ``ApprovalDesk`` that ``/api/approvals`` and ``pml approvals``
use, so a person sees and decides exactly what they would there; the agent's paused run
resumes when it calls ``continue_workflow``. Every value of an approval passes through
``visible`` (invisible and direction-changing characters shown as escapes) and is then
HTML-escaped the way a browser writes it back (``&amp; &lt; &gt;``, and ``&quot;`` in
attributes): the live region is replaced only when its HTML differs from what the browser
holds, so a list that did not change keeps the focus of a person choosing a button.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import quote

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import AlreadyDecided
from pml.execution.approval_desk import DECISIONS, check_decision
from pml.policy.approval_review import visible
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, form, redirect

LIST_PATH = "/ui/approvals"
LIVE_PATH = "/ui/approvals/live"
LIVE_INTERVAL_MS = 1500
ID_SHAPE = re.compile(r"wf_[0-9a-f]{1,61}")
FIELD_CHARS = 300  # intent, rule...: as the review text shows them
FULL_CHARS = 2000  # on the detail page
ARGUMENT_CHARS = 10_000  # the desk already bounds arguments (head … [size] … tail)
LABELS = {
    "once": "Approve once",
    "session": "Approve for the session",
    "always": "Always approve",
    "deny": "Deny",
}
DONE = {
    "once": "approved once",
    "session": "approved for the session",
    "always": "approved until revoked",
    "deny": "denied",
}
DENY_COVERS = "nothing; the run stops and nothing is learned"


def text(value: object, limit: int = FIELD_CHARS) -> Markup:
    """A value as element text: made visible, then escaped exactly as a browser serialises
    text (quotes stay as they are), so a refreshed live region compares equal."""
    shown = visible(value, limit)
    return Markup(
        shown.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\xa0", "&nbsp;")
    )


def attribute(value: object, limit: int = FIELD_CHARS) -> Markup:
    """A value for a double-quoted attribute, escaped as a browser serialises attributes."""
    return Markup(str(text(value, limit)).replace('"', "&quot;"))


@dataclass(frozen=True, slots=True)
class Moment:
    """A time as ``<time datetime=...>`` and as a person reads it (UTC, to the second)."""

    iso: Markup
    shown: Markup


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument as the desk ordered and bounded it (targets first)."""

    name: Markup
    value: Markup
    size: int
    truncated: bool
    target: bool
    empty: bool


@dataclass(frozen=True, slots=True)
class Choice:
    """One decision button and what it would cover."""

    decision: str
    label: str
    aria: Markup  # "Approve once: filesystem:write_file"
    covers: Markup
    style: str


@dataclass(frozen=True, slots=True)
class Review:
    """One approval as the templates show it; every field already escaped."""

    anchor: str  # an element id, from the workflow id's safe shape
    workflow_id: Markup
    href: Markup
    action: Markup
    status: str  # pending | approved | denied
    tool: Markup
    tool_label: Markup  # the tool, for aria-label attributes
    server: Markup
    capability: Markup
    intent: Markup
    stated_intent: Markup
    rule: Markup
    capability_name: Markup | None
    user: Markup
    key: Markup | None
    requested: Moment | None
    expires: Moment | None
    decided: Moment | None
    decided_by: Markup | None
    grant: Markup | None
    arguments: list[Argument]
    choices: list[Choice]


def moment(value: object) -> Moment | None:
    """An ISO time from the desk, or None when there is none."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return Moment(attribute(value, 64), text(value, 64))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    utc = parsed.astimezone(UTC)
    return Moment(Markup(utc.isoformat(timespec="seconds")), text(f"{utc:%Y-%m-%d %H:%M:%S} UTC"))


def _arguments(items: object) -> list[Argument]:
    found: list[Argument] = []
    for item in cast(list[object], items) if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        entry = cast(dict[str, Any], item)
        value = entry.get("value")
        size = entry.get("bytes")
        found.append(
            Argument(
                name=text(entry.get("name"), 128),
                value=text(value, ARGUMENT_CHARS),
                size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                truncated=entry.get("truncated") is True,
                target=entry.get("target") is True,
                empty=value == "",
            )
        )
    return found


def _choices(view: dict[str, Any], tool: str) -> list[Choice]:
    grants = view.get("grants")
    covers = cast(dict[str, object], grants) if isinstance(grants, dict) else {}
    styles = {"once": "primary", "session": "secondary", "always": "secondary", "deny": "danger"}
    return [
        Choice(
            decision=decision,
            label=LABELS[decision],
            aria=attribute(f"{LABELS[decision]}: {tool}"),
            covers=text(DENY_COVERS if decision == "deny" else covers.get(decision), 600),
            style=styles[decision],
        )
        for decision in ("once", "session", "always", "deny")
    ]


def review(view: dict[str, Any], *, full: bool = False) -> Review:
    """The template model of one approval of ``ApprovalDesk.view``."""
    limit = FULL_CHARS if full else FIELD_CHARS
    workflow_id = str(view.get("workflowId") or "")
    path = f"{LIST_PATH}/{quote(workflow_id, safe='')}"
    anchor = workflow_id if ID_SHAPE.fullmatch(workflow_id) else "wf_unknown"
    tool = visible(view.get("tool"), 200)
    status = str(view.get("status") or "pending")

    def optional(name: str) -> Markup | None:
        return text(view.get(name), limit) if view.get(name) else None

    return Review(
        anchor=anchor,
        workflow_id=text(workflow_id, 80),
        href=attribute(path, 200),
        action=attribute(f"{path}/decide", 200),
        status=status if status in ("pending", "approved", "denied") else "pending",
        tool=text(tool, 200),
        tool_label=attribute(tool, 200),
        server=text(view.get("server"), 200),
        capability=text(view.get("capability"), 64),
        intent=text(view.get("intent"), limit),
        stated_intent=text(view.get("statedIntent"), limit),
        rule=text(view.get("rule"), limit),
        capability_name=optional("capabilityName"),
        user=text(view.get("user"), 200),
        key=optional("key"),
        requested=moment(view.get("requestedAt")),
        expires=moment(view.get("expiresAt")),
        decided=moment(view.get("decidedAt")),
        decided_by=optional("decidedBy"),
        grant=optional("grant"),
        arguments=_arguments(view.get("arguments")),
        choices=_choices(view, tool),
    )


def notice_of(request: Request) -> str | None:
    """The confirmation after a decision (``?decided=wf_...&as=once``), when well formed."""
    decided = request.query_params.get("decided", "")
    chosen = request.query_params.get("as", "")
    if not ID_SHAPE.fullmatch(decided) or chosen not in DECISIONS:
        return None
    return f"Approval {decided} {DONE[chosen]}."


def routes(ui: Ui) -> list[Route]:
    """The page's routes."""

    async def listed(viewer: Viewer) -> dict[str, Any]:
        scope = viewer.scope
        views = await ui.services.desk.pending(scope.org, scope.project)
        items = [review(view) for view in views]
        return {
            "waiting": [item for item in items if item.status == "pending"],
            "decided": [item for item in items if item.status != "pending"],
        }

    async def page(request: Request, viewer: Viewer) -> Response:
        return await ui.render(
            request,
            viewer,
            "approvals.html",
            notice=notice_of(request),
            live_path=LIVE_PATH,
            live_interval=LIVE_INTERVAL_MS,
            **await listed(viewer),
        )

    async def live(request: Request, viewer: Viewer) -> Response:
        return ui.fragment("approvals_list.html", csrf=viewer.csrf, **await listed(viewer))

    async def detail(request: Request, viewer: Viewer) -> Response:
        scope = viewer.scope
        view = await ui.services.desk.show(
            request.path_params["workflow_id"], org=scope.org, project=scope.project
        )
        return await ui.render(request, viewer, "approval.html", item=review(view, full=True))

    async def decide(request: Request, viewer: Viewer) -> Response:
        decision = check_decision(form(request).get("decision"))  # INVALID_INPUT: 400
        workflow_id: str = request.path_params["workflow_id"]
        scope = viewer.scope
        try:
            await ui.services.desk.decide(
                workflow_id,
                decision,
                org=scope.org,
                project=scope.project,
                decided_by=viewer.decided_by,
                actor=scope.user,
            )
        except AlreadyDecided as error:
            message = (
                f"{error.message}. A decision is taken once: the first stands, nothing changed."
            )
            return await ui.render(
                request, viewer, "error.html", status=409, code=error.code, message=message
            )
        return redirect(f"{LIST_PATH}?decided={quote(workflow_id, safe='')}&as={decision}")

    return [
        Route(LIST_PATH, ui.page(page), methods=["GET"]),
        Route(LIVE_PATH, ui.page(live), methods=["GET"]),  # before the {workflow_id} route
        Route(LIST_PATH + "/{workflow_id}", ui.page(detail), methods=["GET"]),
        Route(LIST_PATH + "/{workflow_id}/decide", ui.action(decide), methods=["POST"]),
    ]
