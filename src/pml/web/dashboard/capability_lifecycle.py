"""A capability page's lifecycle forms: archive, restore, purge, deprecate, tag a version.

    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/archive       [force=1]
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/restore       new_name=   (or a name)
    GET  /ui/capabilities/acme.webapp.fs.read_json.a7f3/purge         the confirmation step
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/purge         confirm=purge
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/deprecate     replaced_by=&message=
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/undeprecate
    POST /ui/capabilities/acme.webapp.fs.read_json.a7f3/tag           version=2&tag=v1.2.0

Every change goes through ``CapabilityLifecycle`` (what ``pml cap archive`` and the REST API
use), with the signed-in person's scope: it is announced to connected MCP clients and
audited with ``decided_by = user:<name>``. An archive that other capabilities depend on is
refused with the ones the person may see listed, and an "archive anyway" button. A refused
change shows the page again with the error and a 4xx status; nothing was changed. Purge is
admin-only (dashboard sessions are admin sessions) and takes a confirmation step.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml.errors import Forbidden, InvalidInput, NameTaken, NotFound, PmlError
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.scope import Scope
from pml.registry.tools import MAX_HISTORY_VERSIONS, history_answer
from pml.storage.capability_repo import SqlCapabilityRepository, find_visible
from pml.storage.database import Database
from pml.web.api_lifecycle import archive_checked, tag_version
from pml.web.dashboard.capability_format import BASE_PATH, Moment, detail_href, when
from pml.web.dashboard.sessions import Viewer
from pml.web.dashboard.ui import Ui, form, redirect

NOTICES: Final = {
    "archived": "Archived: it can be restored or purged from this page.",
    "restored": "Restored: it is back in lists and tool lists.",
    "restored_partly": "Restored. Some of its old names (aliases) were taken meanwhile and "
    "were not restored.",
    "deprecated": "Marked deprecated: every answer about it now says so.",
    "undeprecated": "No longer deprecated.",
    "tagged": "Version tagged.",
}
STATUS_OF: Final = {
    "NAME_TAKEN": 409,
    "INVALID_NAME": 400,
    "INVALID_INPUT": 400,
    "NOT_FOUND": 404,
    "VERSION_NOT_FOUND": 404,
    "PERMISSION_DENIED": 403,
    "FORBIDDEN": 403,
}
CONFIRM: Final = "purge"
NAME_TAKEN_MEANWHILE: Final = (
    "Its name was taken by another capability meanwhile: give it a new name to restore it."
)
_DIGITS = re.compile(r"[0-9]{1,9}")
Run = Callable[[Viewer, str, dict[str, str]], Awaitable[Response]]


class Show(Protocol):
    """``capability_detail``'s page renderer."""

    def __call__(
        self,
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
    ) -> Awaitable[Response]: ...


@dataclass(frozen=True, slots=True)
class Link:
    """A capability named on the page: its name and where its page is."""

    name: str
    href: str


@dataclass(frozen=True, slots=True)
class Blocked:
    """An archive refused because active capabilities use this one."""

    dependants: list[Link]
    hidden: int


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Where a capability is in its life, as its page shows it."""

    archived_at: Moment | None = None
    archived_by: str = ""
    held_aliases: list[str] = field(default_factory=list[str])
    deprecated: str | None = None
    deprecated_at: Moment | None = None
    deprecated_by: str = ""
    replaced_by: Link | None = None
    replaced_by_fqdn: str | None = None
    untagged: list[int] = field(default_factory=list[int])


@dataclass(frozen=True, slots=True)
class Mark:
    """What the listing shows beside a name: deprecated (and the replacement), archived."""

    deprecated: bool = False
    replaced_by: str | None = None
    archived_at: Moment | None = None
    archived_by: str = ""


async def lifecycle_of(
    db: Database, scope: Scope, whois: Mapping[str, Any], versions: Sequence[Mapping[str, Any]]
) -> Lifecycle:
    """The page's lifecycle facts of ``whois`` (``cap_whois``'s JSON) and its versions."""
    replaced = whois.get("replaced_by")
    link: Link | None = None
    if isinstance(replaced, str):
        found = (await find_visible(db, scope, [replaced])).get(replaced)
        if found is not None:
            link = Link(found.display_name, detail_href(found.fqdn))
    aliases: list[Mapping[str, str]] = whois.get("archived_aliases") or []
    held = [str(item.get("alias", "")) for item in aliases]
    return Lifecycle(
        archived_at=when(whois.get("archived_at")),
        archived_by=str(whois.get("archived_by") or ""),
        held_aliases=held,
        deprecated=_deprecation(whois),
        deprecated_at=when(whois.get("deprecated_at")),
        deprecated_by=str(whois.get("deprecated_by") or ""),
        replaced_by=link,
        replaced_by_fqdn=replaced if isinstance(replaced, str) else None,
        untagged=[int(v["version"]) for v in versions if not v.get("version_tag")],
    )


async def archived_history(db: Database, scope: Scope, whois: Mapping[str, Any]) -> dict[str, Any]:
    """``cap_history``'s JSON for an archived record (names no longer resolve to it)."""
    fqdn, name = str(whois["fqdn"]), str(whois.get("display_name", ""))
    async with db.read() as conn:  # the newest, as cap_history shows them
        versions = await SqlCapabilityRepository(conn).versions_of(fqdn, MAX_HISTORY_VERSIONS + 1)
    newest = list(reversed(versions))
    return await history_answer(fqdn, name, newest, MAX_HISTORY_VERSIONS, scope.tenant)


async def marks_of(
    db: Database, scope: Scope, items: Sequence[Mapping[str, Any]]
) -> dict[str, Mark]:
    """The listing's marks by FQDN, replacements named as the viewer may see them."""
    wanted = [
        str(i["replaced_by"]) for i in items if i.get("deprecated_at") and i.get("replaced_by")
    ]
    names = {fqdn: r.display_name for fqdn, r in (await find_visible(db, scope, wanted)).items()}
    marks: dict[str, Mark] = {}
    for item in items:
        if not item.get("deprecated_at") and not item.get("archived_at"):
            continue
        replaced = item.get("replaced_by")
        marks[str(item.get("fqdn"))] = Mark(
            deprecated=bool(item.get("deprecated_at")),
            replaced_by=names.get(str(replaced)) if replaced else None,
            archived_at=when(item.get("archived_at")),
            archived_by=str(item.get("archived_by") or ""),
        )
    return marks


def _fields(values: Mapping[str, str], allowed: set[str], required: set[str]) -> None:
    extra = sorted(set(values) - allowed - {"csrf"})
    missing = sorted(required - set(values))
    if extra or missing:
        problem = f"unexpected field {extra[0][:40]!r}" if extra else f"{missing[0]} is missing"
        raise InvalidInput(f"This form is not one this page sends: {problem}.")


def routes(ui: Ui, show: Show, checked_fqdn: Callable[[object], str]) -> list[Route]:
    """The lifecycle posts of a capability's page and the purge confirmation step."""
    services = ui.services
    lifecycle = CapabilityLifecycle(services.registry)

    def post(
        kind: str, allowed: set[str], required: set[str] | None = None
    ) -> Callable[[Run], Route]:
        def decorate(run: Run) -> Route:
            async def endpoint(request: Request, viewer: Viewer) -> Response:
                fqdn = checked_fqdn(request.path_params["fqdn"])
                values = dict(form(request))
                values.pop("csrf", None)
                try:
                    _fields(values, allowed, required or set())
                    return await run(viewer, fqdn, values)
                except PmlError as error:
                    status = STATUS_OF.get(error.code)
                    if status is None:
                        raise
                    blocked = _blocked(error)
                    return await show(
                        request,
                        viewer,
                        fqdn,
                        error=None if blocked else error,
                        status=status,
                        attempted={**values, "form": kind},
                        blocked=blocked,
                    )

            return Route(f"{BASE_PATH}/{{fqdn:path}}/{kind}", ui.action(endpoint), methods=["POST"])

        return decorate

    @post("archive", {"force"})
    async def archive(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        force = _flag(values.get("force", ""), "force")
        await archive_checked(services, viewer.scope, fqdn, force=force)
        return redirect(f"{detail_href(fqdn)}?notice=archived")

    @post("restore", {"new_name"}, {"new_name"})
    async def restore(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        new_name = values["new_name"].strip() or None
        try:
            done = await lifecycle.restore(viewer.scope, fqdn, new_name=new_name)
        except NameTaken:
            if new_name is not None:
                raise
            raise NameTaken(NAME_TAKEN_MEANWHILE) from None
        notice = "restored_partly" if done.aliases_dropped else "restored"
        return redirect(f"{detail_href(fqdn)}?notice={notice}")

    @post("purge", {"confirm"}, {"confirm"})
    async def purge(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        _admin(viewer)
        if values["confirm"] != CONFIRM:
            raise InvalidInput("Confirm the purge with the button of its confirmation step.")
        await lifecycle.purge(viewer.scope, fqdn)
        return redirect(f"{BASE_PATH}?archived=1&notice=purged")

    @post("deprecate", {"replaced_by", "message"}, {"replaced_by", "message"})
    async def deprecate(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        replaced_by = values["replaced_by"].strip() or None
        message = values["message"].replace("\r\n", "\n").strip() or None
        try:
            await lifecycle.deprecate(viewer.scope, fqdn, replaced_by=replaced_by, message=message)
        except NotFound as error:
            if replaced_by is None:
                raise
            raise InvalidInput(
                f"Replacement not found: {error.message}", field="replaced_by"
            ) from None
        return redirect(f"{detail_href(fqdn)}?notice=deprecated")

    @post("undeprecate", set())
    async def undeprecate(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        await lifecycle.deprecate(viewer.scope, fqdn, undo=True)
        return redirect(f"{detail_href(fqdn)}?notice=undeprecated")

    @post("tag", {"version", "tag"}, {"version", "tag"})
    async def tag(viewer: Viewer, fqdn: str, values: dict[str, str]) -> Response:
        number = values["version"].strip()
        if number and _DIGITS.fullmatch(number) is None:
            raise InvalidInput("Choose a version from the list.", field="version")
        version = int(number) if number else None
        await tag_version(services, viewer.scope, fqdn, version, values["tag"].strip())
        return redirect(f"{detail_href(fqdn)}?notice=tagged")

    async def confirm_purge(request: Request, viewer: Viewer) -> Response:
        fqdn = checked_fqdn(request.path_params["fqdn"])
        _admin(viewer)
        if request.query_params:
            raise InvalidInput("This page takes no parameters.")
        return await show(request, viewer, fqdn, confirm_purge=True)

    return [
        archive,
        restore,
        purge,
        deprecate,
        undeprecate,
        tag,
        Route(f"{BASE_PATH}/{{fqdn:path}}/purge", ui.page(confirm_purge), methods=["GET"]),
    ]


def _deprecation(whois: Mapping[str, Any]) -> str | None:
    if not whois.get("deprecated_at"):
        return None
    text = whois.get("deprecated") or whois.get("deprecation_message")
    return str(text) if text else "Deprecated."


def _flag(value: str, name: str) -> bool:
    if value not in ("", "1"):
        raise InvalidInput(f"{name} must be 1 or left out.", field=name)
    return value == "1"


def _admin(viewer: Viewer) -> None:
    if not viewer.principal.is_admin:
        raise Forbidden("Purging deletes a capability's history for good: admins only.")


def _blocked(error: PmlError) -> Blocked | None:
    """The dependants of a refused archive (``archive_checked``'s error data), if it is one."""
    if error.data.get("field") != "force" or "dependants" not in error.data:
        return None
    shown: list[dict[str, str]] = error.data["dependants"]
    links = [Link(item["display_name"], detail_href(item["fqdn"])) for item in shown]
    return Blocked(links, int(error.data.get("hiddenDependants", 0)))
