"""A capability's lifecycle over HTTP (SPEC §11, §14): archive, restore, deprecate, tag, purge.

    POST   /api/capabilities/fs:read_json/archive     {"force"?: bool}
    200 {<the record, as GET /api/capabilities/{fqdn}>, "dependants": [{"fqdn", "display_name"}]}
    POST   /api/capabilities/fs:read_json/restore     {"new_name"?: "fs:read_json_v1"}
    200 {<the record>, "aliasesDropped": ["old_name"]}
    POST   /api/capabilities/fs:read_json/deprecate   {"replaced_by"?, "message"?, "undo"?: bool}
    200 {<the record>, "deprecated": "use fs:load_json", "replacedBy": "acme.webapp.fs..."}
                                                  # (neither once undone)
    POST   /api/capabilities/fs:read_json/tags        {"tag": "v1.2.0", "version"?: 2}  # number
    200 {<the record>, "tagged": {"version": 2, "tag": "v1.2.0"}}
    DELETE /api/capabilities/fs:read_json             (admin keys only: purge an archived one)
    200 {<the record as it was>, "purged": true}

``{name}`` is a display name, an FQDN or a capability id of the key's org/project (an archived
one for restore and purge: its FQDN or the name it had). Every change goes through
:class:`pml.registry.lifecycle.CapabilityLifecycle`, which announces it (tool lists,
discovery) and audits it with the key's user (``decided_by = user:<name>``).

Roles: retiring a capability is something both a person and an agent do, and every change
but purge can be undone, so an ``agent`` key may archive, restore, deprecate and tag the
capabilities of its own org/project (as it may rename them with ``cap_rename``). Purge
deletes history for good: ``admin`` keys only, an ``agent`` key gets 403 ``FORBIDDEN``
before anything is looked up.

Bodies are read strictly: a JSON object (an empty body is ``{}``) of at most 4 KiB, only the
route's keys, booleans as ``true``/``false``, ``version`` a whole number, strings of bounded
length without control characters (``message`` may hold new lines and tabs); anything else
is 400 ``INVALID_INPUT`` and nothing changes. The query string must be empty. A capability
the key cannot change is 404 (another tenant's) or 403 ``PERMISSION_DENIED`` (visible from
another project of the org); a name taken on restore is 409 ``NAME_TAKEN``. An archive that
active capabilities depend on is refused without ``force`` (400, ``field: "force"``),
naming those the key may see and counting the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pml import wire_json
from pml.errors import Forbidden, InvalidInput, NameTaken
from pml.registry.lifecycle import MAX_MESSAGE, CapabilityLifecycle
from pml.registry.models import CapabilityRecord, VersionRecord
from pml.registry.scope import Scope
from pml.web.api_capabilities import answer, scope_of
from pml.web.auth import principal_of
from pml.web.services import WebServices

MAX_BODY_BYTES: Final = 4096
MAX_NAME: Final = 256
MAX_TAG: Final = 64
MAX_VERSION: Final = 1_000_000_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # new lines and tabs allowed


@dataclass(frozen=True, slots=True)
class Field:
    """One key a body may carry: its JSON type and, for strings, its longest value."""

    kind: type
    longest: int = MAX_NAME
    multiline: bool = False
    required: bool = False


BODIES: Final[dict[str, dict[str, Field]]] = {
    "archive": {"force": Field(bool)},
    "restore": {"new_name": Field(str)},
    "deprecate": {
        "replaced_by": Field(str),
        "message": Field(str, MAX_MESSAGE, multiline=True),
        "undo": Field(bool),
    },
    "tags": {"tag": Field(str, MAX_TAG, required=True), "version": Field(int)},
    "purge": {},
}


def _check_value(key: str, value: object, field: Field) -> None:
    if field.kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
            raise InvalidInput(f"{key} must be a whole number from 1 (a version)", field=key)
        return
    if field.kind is bool:
        if not isinstance(value, bool):
            raise InvalidInput(f"{key} must be true or false", field=key)
        return
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string", field=key)
    if len(value) > field.longest:
        raise InvalidInput(f"{key} is too long (at most {field.longest} characters)", field=key)
    if (_CONTROL_IN_TEXT if field.multiline else _CONTROL).search(value) is not None:
        raise InvalidInput(f"{key} must not contain control characters", field=key)


def parse_body(raw: bytes, what: str) -> dict[str, Any]:
    """The body of route ``what`` as checked values (``null`` = not given), or ``INVALID_INPUT``."""
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidInput(f"Body too large (max {MAX_BODY_BYTES} bytes)", field="body")
    try:
        data: object = wire_json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        raise InvalidInput("Body must be a JSON object", field="body") from None
    if not isinstance(data, dict):
        raise InvalidInput("Body must be a JSON object", field="body")
    fields = BODIES[what]
    body: dict[str, Any] = dict(data)  # pyright: ignore[reportUnknownArgumentType]
    unknown = sorted(set(body) - set(fields))
    if unknown:
        shown = _CONTROL.sub("?", unknown[0][:40])
        allowed = ", ".join(fields) or "nothing"
        raise InvalidInput(f"Unknown field: {shown!r}. This route takes {allowed}.", field=shown)
    checked: dict[str, Any] = {}
    for key, field in fields.items():
        value = body.get(key)
        if value is None:
            if field.required:
                raise InvalidInput(f"{key} is required", field=key)
            continue
        _check_value(key, value, field)
        checked[key] = value
    return checked


def checked_name(raw: object) -> str:
    """The ``{name}`` of a path: a plain reference (the version goes in the body)."""
    if not isinstance(raw, str) or not raw.strip() or len(raw) > MAX_NAME:
        raise InvalidInput(f"Give a capability name of 1-{MAX_NAME} characters", field="name")
    if _CONTROL.search(raw) is not None:
        raise InvalidInput("The name must not contain control characters", field="name")
    if "@" in raw:
        raise InvalidInput(
            'Give the capability name without @version (tags take {"version": N})',
            field="name",
        )
    return raw


def record_json(record: CapabilityRecord) -> dict[str, Any]:
    """A record as the capability routes answer it, with ``deprecated``/``replacedBy``."""
    return record.to_dict() | (record.deprecation or {})


def brief(record: CapabilityRecord) -> dict[str, str]:
    """A capability named in an answer: its FQDN and display name."""
    return {"fqdn": record.fqdn, "display_name": record.display_name}


async def archive_checked(
    services: WebServices, scope: Scope, ref: str, *, force: bool
) -> tuple[CapabilityRecord, list[CapabilityRecord]]:
    """``lifecycle.archive``: a refusal names only the dependants ``scope`` may see
    (``dependants`` and ``hiddenDependants`` in its data), as does a forced archive."""
    return await CapabilityLifecycle(services.registry).archive(scope, ref, force=force)


async def tag_version(
    services: WebServices, scope: Scope, name: str, version: int | None, tag: str
) -> VersionRecord:
    """Tag version number ``version`` of ``name`` (its current one when None)."""
    ref = name if version is None else f"{name}@v{version}"
    return await CapabilityLifecycle(services.registry).tag(scope, ref, tag)


def lifecycle_routes(services: WebServices) -> list[Route]:
    """The lifecycle routes (mounted behind ``ApiKeyMiddleware``)."""
    lifecycle = CapabilityLifecycle(services.registry)

    async def read(request: Request, what: str) -> tuple[Scope, str, dict[str, Any]]:
        scope = scope_of(request)
        if what == "purge" and not principal_of(request).is_admin:
            raise Forbidden(
                "Purging deletes a capability's history for good: it needs an admin API key "
                "(agent keys may archive, restore, deprecate and tag)"
            )
        if request.query_params:
            raise InvalidInput("This route takes no query parameters", field="query")
        name = checked_name(request.path_params["name"])
        return scope, name, parse_body(await request.body(), what)

    async def archive(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope, name, body = await read(request, "archive")
            force = bool(body.get("force", False))
            record, dependants = await archive_checked(services, scope, name, force=force)
            return record_json(record) | {"dependants": [brief(item) for item in dependants]}

        return await answer(request, "/api/capabilities/{name}/archive", run)

    async def restore(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope, name, body = await read(request, "restore")
            new_name = body.get("new_name")
            try:
                restored = await lifecycle.restore(scope, name, new_name=new_name)
            except NameTaken:
                if new_name is not None:
                    raise
                raise NameTaken(
                    "Its name was taken by another capability meanwhile: restore it with "
                    '{"new_name": "..."}'
                ) from None
            return record_json(restored.record) | {"aliasesDropped": restored.aliases_dropped}

        return await answer(request, "/api/capabilities/{name}/restore", run)

    async def deprecate(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope, name, body = await read(request, "deprecate")
            undo = bool(body.get("undo", False))
            if undo and ("replaced_by" in body or "message" in body):
                raise InvalidInput("undo takes no replaced_by or message", field="undo")
            record = await lifecycle.deprecate(
                scope,
                name,
                replaced_by=body.get("replaced_by"),
                message=body.get("message"),
                undo=undo,
            )
            return record_json(record)

        return await answer(request, "/api/capabilities/{name}/deprecate", run)

    async def tag(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope, name, body = await read(request, "tags")
            tagged = await tag_version(services, scope, name, body.get("version"), body["tag"])
            record = (await services.registry.whois(scope, tagged.capability_fqdn)).record
            done = {"version": tagged.version, "tag": tagged.version_tag}
            return record_json(record) | {"tagged": done}

        return await answer(request, "/api/capabilities/{name}/tags", run)

    async def purge(request: Request) -> Response:
        async def run() -> dict[str, Any]:
            scope, name, _ = await read(request, "purge")
            return record_json(await lifecycle.purge(scope, name)) | {"purged": True}

        return await answer(request, "DELETE /api/capabilities/{name}", run)

    return [
        Route("/api/capabilities/{name}/archive", archive, methods=["POST"]),
        Route("/api/capabilities/{name}/restore", restore, methods=["POST"]),
        Route("/api/capabilities/{name}/deprecate", deprecate, methods=["POST"]),
        Route("/api/capabilities/{name}/tags", tag, methods=["POST"]),
        Route("/api/capabilities/{name}", purge, methods=["DELETE"]),
    ]
