"""Name rules that need the database: uniqueness, renames with aliases, free FQDNs.

    async with scoped_write(db, scope) as repo:         # one transaction, names locked
        await ensure_name_free(repo, scope, "fs:read_json", "mcp__fs__read_json")
        await apply_new_name(repo, scope, record, "fs:read_json", now)

Display names are unique in an org/project across display names and aliases, and so are
the MCP tool names they give. An alias always points at an FQDN, so renaming A to B to C
leaves A and B both pointing at the same record: alias chains cannot exist.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from typing import cast

from sqlalchemy.exc import DBAPIError, IntegrityError

from pml.analysis.code_hash import normalized_code_hash, parse_snippet
from pml.analysis.secret_text import holds_token
from pml.errors import (
    InvalidInput,
    LimitExceeded,
    NameTaken,
    NotFound,
    PermissionDenied,
    StorageError,
)
from pml.policy.scrub import redact_secrets
from pml.registry.fqdn import fqdn_candidates, message_value
from pml.registry.models import CapabilityDraft, CapabilityRecord
from pml.registry.names import (
    auto_display_name,
    split_display_name,
    tool_name_for,
    validate_name,
)
from pml.registry.routing import Routing
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.capability_writes import (
    NameHit,
    existing_fqdns,
    probe_names,
    single_statements,
)
from pml.storage.database import Database

TAG_PATTERN = re.compile(r"[A-Za-z0-9_:.-]{1,64}")
MAX_TAGS = 32
# The most tags a request may list, repeats included (a repeat is dropped, not refused).
MAX_TAG_ITEMS = 4 * MAX_TAGS
MAX_DESCRIPTION = 4000
MAX_INTENT = 10_000
MAX_TOOLS = 1000
MAX_TOOL_REF = 400
SERVER_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Fields a new version rewrites on the record (the FQDN and the name never change).
VERSIONED_FIELDS = (
    "code",
    "code_hash",
    "intent",
    "description",
    "parameters_schema",
    "tools_used",
    "routing",
    "version",
    "version_tag",
    "updated_by",
    "updated_at",
)


@asynccontextmanager
async def scoped_write(db: Database, scope: Scope) -> AsyncGenerator[SqlCapabilityRepository]:
    """A write transaction holding the scope's name lock; unique-index races → NAME_TAKEN."""
    try:
        async with db.transaction() as conn:
            repo = SqlCapabilityRepository(conn)
            await repo.lock_scope(scope.org, scope.project)
            yield repo
    except IntegrityError as error:
        raise NameTaken(
            f"A concurrent change took this name or code in scope {scope.key}; try again"
        ) from error


def quota_exceeded(scope: Scope, limit: int) -> LimitExceeded:
    """``LIMIT_EXCEEDED`` for a project that holds ``limit`` capabilities already."""
    return LimitExceeded(
        f"Project {scope.key} already holds {limit} capabilities, its limit "
        "(limits.capabilities_per_project): this code was not saved as a new capability",
        limit="capabilities_per_project",
        max=limit,
    )


def taken_message(name: str, scope: Scope) -> str:
    """The exact SPEC message for a name already used in a scope."""
    return f"Capability name '{name}' already exists in scope {scope.key}"


async def ensure_name_free(
    repo: SqlCapabilityRepository,
    scope: Scope,
    name: str,
    tool_name: str,
    *,
    owner: str | None = None,
) -> None:
    """``NAME_TAKEN`` unless ``name`` and its tool name are free (or already ``owner``'s).

    Display names and tool names share one namespace for resolution, so a display name may
    not equal another record's tool name (``mcp__fs__read``) and the other way round. One
    statement checks both names against display names, tool names and aliases.
    """
    for hit in await probe_names(repo.conn, scope.org, scope.project, [name, tool_name]):
        if isinstance(hit, NameHit) and hit.owner != owner:
            raise NameTaken(taken_message(name, scope))


async def free_auto_name(
    repo: SqlCapabilityRepository, scope: Scope, namespace: str, code_hash: str
) -> tuple[str, str, str]:
    """``(display_name, namespace, action)`` for an unnamed capability, longer on collision
    (every length is checked in one statement)."""
    candidates = [
        (f"unnamed_{code_hash[:length]}", f"exec_{code_hash[:length]}")
        for length in (8, 12, 16, 24, 32, 64)
    ]
    tools = [tool_name_for(namespace, action) for _, action in candidates]
    names = [display for display, _ in candidates]
    hits = await probe_names(repo.conn, scope.org, scope.project, [*names, *tools])
    held = {(hit.column, hit.name) for hit in hits if isinstance(hit, NameHit)}
    for (display_name, action), tool in zip(candidates, tools, strict=True):
        as_name = {("display_name", display_name), ("alias", display_name)}
        as_tool = {("tool_name", tool), ("alias_tool_name", tool)}
        if not (held & as_name) and not (held & as_tool):
            return display_name, namespace, action
    raise NameTaken(taken_message(auto_display_name(code_hash), scope))


async def free_fqdn(
    repo: SqlCapabilityRepository, scope: Scope, namespace: str, action: str, code_hash: str
) -> str:
    """The shortest FQDN (4 hex, longer only on collision) not used yet (one statement)."""
    candidates = [
        str(candidate)
        for candidate in fqdn_candidates(scope.org, scope.project, namespace, action, code_hash)
    ]
    used = await existing_fqdns(repo.conn, candidates)
    for candidate in candidates:
        if candidate not in used:
            return candidate
    raise NameTaken(f"No free FQDN for {namespace}.{action} in scope {scope.key}")


async def owned(repo: SqlCapabilityRepository, scope: Scope, name: str) -> CapabilityRecord:
    """The record ``name`` designates, which must belong to the caller's org/project."""
    found = await repo.resolve_name(scope, name)
    if found is None:
        raise NotFound(f"Capability not found: {message_value(name)}")
    record = found[0]
    if (record.org, record.project) != (scope.org, scope.project):
        raise PermissionDenied(
            f"Capability '{record.display_name}' belongs to scope {record.scope_key}; "
            f"it cannot be changed from scope {scope.key}"
        )
    return record


async def apply_new_name(
    repo: SqlCapabilityRepository,
    scope: Scope,
    record: CapabilityRecord,
    new_name: str,
    now: datetime,
) -> None:
    """Rename ``record``: the new name must be free; the old one becomes an alias."""
    namespace, action = split_display_name(new_name, record.namespace)
    tool_name = tool_name_for(namespace, action)
    await ensure_name_free(repo, scope, new_name, tool_name, owner=record.fqdn)
    # Taking back one of its own old names turns that alias into the display name again.
    await repo.delete_alias(scope.org, scope.project, new_name)
    await repo.insert_alias(
        scope.org, scope.project, record.display_name, record.tool_name, record.fqdn, now
    )
    await repo.update_record(
        record.fqdn,
        display_name=new_name,
        named=True,
        namespace=namespace,
        action=action,
        tool_name=tool_name,
        updated_by=scope.user,
        updated_at=now,
    )


def check_tags(tags: object) -> list[str]:
    """Tags as a de-duplicated list, or ``INVALID_INPUT`` naming the bad one."""
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise InvalidInput("tags must be a list of strings", field="tags")
    given = cast(Sequence[object], tags)
    # Counted before any is checked: each costs a pattern and a secret check, and a 4 MiB
    # request holds ~450 000 of them (one such list used to stall the event loop for minutes).
    if len(given) > MAX_TAG_ITEMS:
        raise InvalidInput(
            f"At most {MAX_TAGS} tags per capability ({len(given)} given)", field="tags"
        )
    items: list[str] = []
    for tag in given:
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
            raise InvalidInput(
                f"Invalid tag: {message_value(cast(object, tag))}. "
                "Use 1-64 letters, digits, '_', ':', '.' or '-'.",
                field="tags",
            )
        if holds_token(tag):
            raise InvalidInput("a tag looks like a secret (a token or key)", field="tags")
        if tag not in items:
            items.append(tag)
    if len(items) > MAX_TAGS:
        raise InvalidInput(f"At most {MAX_TAGS} tags per capability", field="tags")
    return items


def check_description(description: object) -> str:
    """A description of at most 4000 characters, its secrets redacted as an intent's are
    (SPEC §6.1: it is shown to every caller who may see the capability)."""
    if not isinstance(description, str):
        raise InvalidInput("description must be a string", field="description")
    if len(description) > MAX_DESCRIPTION:
        raise InvalidInput(
            f"description is too long: {len(description)} characters (max: {MAX_DESCRIPTION})",
            field="description",
        )
    return redact_secrets(description)


def check_intent(intent: object) -> str | None:
    """An intent of at most 10 000 characters (or None)."""
    if intent is None:
        return None
    if not isinstance(intent, str):
        raise InvalidInput("intent must be a string", field="intent")
    if len(intent) > MAX_INTENT:
        raise InvalidInput(
            f"intent is too long: {len(intent)} characters (max: {MAX_INTENT})", field="intent"
        )
    return intent


def stored_intent(intent: object) -> str | None:
    """``check_intent``, then scrubbed as the audit scrubs: a secret typed into an intent
    is never stored."""
    checked = check_intent(intent)
    return redact_secrets(checked) if checked else checked


def check_tools_used(tools: object) -> list[str]:
    """The tool references a run used: a list of at most 1000 short strings."""
    if isinstance(tools, str) or not isinstance(tools, Sequence):
        raise InvalidInput("tools_used must be a list of strings", field="tools_used")
    items = cast(Sequence[object], tools)
    if len(items) > MAX_TOOLS or not all(
        isinstance(tool, str) and 0 < len(tool) <= MAX_TOOL_REF for tool in items
    ):
        raise InvalidInput(
            f"tools_used must hold at most {MAX_TOOLS} non-empty strings of at most "
            f"{MAX_TOOL_REF} characters",
            field="tools_used",
        )
    return [cast(str, tool) for tool in items]


def check_latency(latency_ms: object) -> float:
    """A run's latency in milliseconds: a finite number, zero or more."""
    if (
        isinstance(latency_ms, bool)
        or not isinstance(latency_ms, int | float)
        or not math.isfinite(latency_ms)
        or latency_ms < 0
    ):
        raise InvalidInput(f"latency_ms must be a finite number >= 0, not {latency_ms!r}")
    return float(latency_ms)


def check_routing(routing: object) -> Routing:
    """``local`` or ``cloud``."""
    if routing == "local":
        return "local"
    if routing == "cloud":
        return "cloud"
    raise InvalidInput(
        f"Invalid routing: {message_value(routing)}. Use local or cloud.", field="routing"
    )


def server_component(name: object) -> str:
    """An upstream server name as an FQDN component (unsafe characters become ``_``)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("server name must be a non-empty string", field="name")
    # 60, so that the display name ``mcp:<component>`` stays within the 64-character limit.
    return SERVER_UNSAFE.sub("_", name.strip())[:60]


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def check_code_hash(code: str, given: str | None, *, parsed: bool = False) -> str:
    """The identity hash: ``given`` (of the code as written, before a rewrite) or ``code``'s.
    The stored code must parse (``parsed``: the caller's analysis has parsed it)."""
    if given is None:
        return normalized_code_hash(code)
    if not isinstance(given, str) or not _SHA256_HEX.fullmatch(given):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("code_hash must be 64 lowercase hex characters", field="code_hash")
    if not parsed:
        parse_snippet(code)
    return given


async def check_name_before_run(
    db: Database, scope: Scope, name: object, code_hash: str, *, quota: int = 0
) -> str:
    """``INVALID_NAME`` / ``NAME_TAKEN`` before running code to be captured as ``name``, and
    ``LIMIT_EXCEEDED`` when it would be a new capability of a project at its ``quota``.

    A name already held by the capability of this very code is fine (running it again).
    Capture checks again, atomically; this spares running code whose capture must fail.
    One statement asks for the names, the code's capability and the project's size.
    """
    valid = validate_name(name)
    # The tool name depends on the namespace capture picks; capture checks it then.
    try:
        found = await probe_names(
            single_statements(db),
            scope.org,
            scope.project,
            [valid],
            code_hash=code_hash,
            quota=quota,
        )
    except (OSError, DBAPIError) as error:
        raise StorageError(f"Database error: {error}") from error
    owner = next(
        (hit[1] for hit in found if not isinstance(hit, NameHit) and hit[0] == "code"), None
    )
    if any(isinstance(hit, NameHit) and hit.owner != owner for hit in found):
        raise NameTaken(taken_message(valid, scope))
    size = next(
        (int(hit[1]) for hit in found if not isinstance(hit, NameHit) and hit[0] == "size"), 0
    )
    if owner is None and quota > 0 and size >= quota:
        raise quota_exceeded(scope, quota)
    return valid


def checked_draft(draft: CapabilityDraft) -> CapabilityDraft:
    """The draft with its free-form fields checked (``INVALID_INPUT`` naming the field)."""
    if not isinstance(draft.parameters_schema, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("parameters_schema must be a JSON object", field="parameters_schema")
    description = draft.description
    return replace(
        draft,
        intent=stored_intent(draft.intent),
        description=check_description(description) if description is not None else None,
        tools_used=check_tools_used(draft.tools_used),
    )
