"""Named capabilities as MCP tools (SPEC §6.6): one cached listing per caller.

    catalog = CapabilityToolCatalog(db)
    listing = await catalog.listing(scope)      # .tools, .fqdn_of("mcp__fs__read_json")
    catalog.invalidate("acme", "web")           # after a change in that org/project

A scope lists the named capabilities of its own org/project that it may see (its private
ones included), as ``mcp__<namespace>__<action>`` with the capability's parameters schema as
``inputSchema``. Capabilities of other projects stay reachable by FQDN through
``pml_execute``; listing them as tools would mix names of different owners. A listing is
built once and reused until a change in its org/project invalidates it, so ``tools/list``
costs no database round trip in the steady state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types
import sqlalchemy as sa

from pml.registry.names import TOOL_NAME_PATTERN
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import capability_records as records

MAX_DESCRIPTION: Final = 1024
_EMPTY_OBJECT: Final[dict[str, Any]] = {"type": "object", "properties": {}}

_r = records.c
LISTING_STATEMENT = (
    sa.select(
        _r.tool_name,
        _r.fqdn,
        _r.display_name,
        _r.description,
        _r.intent,
        _r.parameters_schema,
        _r.version,
        _r.deprecated_at,
        _r.deprecation_message,
    )
    .where(
        _r.archived_at.is_(None),
        _r.org == sa.bindparam("org", type_=sa.String()),
        _r.project == sa.bindparam("project", type_=sa.String()),
        sa.or_(
            _r.visibility != "private", _r.created_by == sa.bindparam("user", type_=sa.String())
        ),
        _r.record_type == "capability",
        _r.named.is_(True),
    )
    .order_by(_r.tool_name)
)


@dataclass(frozen=True, slots=True)
class ToolListing:
    """The capability tools one caller sees, and what each name runs.

    ``wire`` holds each tool as the JSON text it is sent as; ``tools`` (the SDK's models,
    for the SDK server's path) are built from it on first use.
    """

    wire: tuple[str, ...]
    fqdns: Mapping[str, str]
    fingerprint: str
    _models: list[tuple[mcp_types.Tool, ...]] = field(
        default_factory=list[tuple[mcp_types.Tool, ...]], compare=False, repr=False
    )

    @property
    def tools(self) -> tuple[mcp_types.Tool, ...]:
        """The tools as ``mcp_types.Tool`` (built once)."""
        if not self._models:
            self._models.append(
                tuple(mcp_types.Tool.model_validate_json(text) for text in self.wire)
            )
        return self._models[0]

    def fqdn_of(self, tool_name: str) -> str | None:
        """The FQDN behind a listed tool name, or ``None``."""
        return self.fqdns.get(tool_name)


def input_schema(schema: object) -> dict[str, Any]:
    """A capability's parameters schema as an MCP ``inputSchema`` (always ``type: object``).

    Schemas come from PML's own analysis; one that is not an object schema (a damaged or
    hand-edited row) is listed as an open object rather than breaking the whole list.
    """
    if not isinstance(schema, dict):
        return dict(_EMPTY_OBJECT)
    typed: dict[str, Any] = dict(schema)  # pyright: ignore[reportUnknownArgumentType]
    kind = typed.setdefault("type", "object")
    properties = typed.get("properties", {})
    if kind != "object" or not isinstance(properties, dict):
        return dict(_EMPTY_OBJECT)
    return typed


def describe(
    display_name: str, description: str | None, intent: str | None, deprecated: str | None = None
) -> str:
    """The tool description an agent reads: the capability's own words, then what it is
    (a deprecated one says so first)."""
    text = (description or intent or "").strip()
    if deprecated is not None:
        text = f"DEPRECATED: {deprecated}. {text}".strip()
    suffix = f"(PML capability {display_name})"
    if not text:
        return f"Learned capability {display_name}."
    room = MAX_DESCRIPTION - len(suffix) - 1
    if len(text) > room:
        text = text[: room - 1].rstrip() + "…"
    return f"{text} {suffix}"


class CapabilityToolCatalog:
    """Builds and caches each caller's capability tools (see module)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cache: dict[tuple[str, str, str], ToolListing] = {}
        self._generations: dict[tuple[str, str], int] = {}

    async def listing(self, scope: Scope) -> ToolListing:
        """The caller's capability tools (from the cache when nothing changed)."""
        key = (scope.org, scope.project, scope.user)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        project = (scope.org, scope.project)
        generation = self._generations.get(project, 0)
        listing = await self._load(scope)
        if self._generations.get(project, 0) == generation:  # no change while it loaded
            self._cache[key] = listing
        return listing

    def cached(self, scope: Scope) -> ToolListing | None:
        """The cached listing of ``scope``, without building one."""
        return self._cache.get((scope.org, scope.project, scope.user))

    def invalidate(self, org: str, project: str) -> None:
        """Forget the listings of ``org.project`` (a capability there changed)."""
        project_key = (org, project)
        self._generations[project_key] = self._generations.get(project_key, 0) + 1
        for key in [k for k in self._cache if k[:2] == project_key]:
            del self._cache[key]

    def invalidate_all(self) -> None:
        """Forget every listing (changes may have been missed)."""
        for project_key in {k[:2] for k in self._cache}:
            self.invalidate(*project_key)

    async def _load(self, scope: Scope) -> ToolListing:
        async with self._db.read() as conn:
            rows = list(
                await conn.execute(
                    LISTING_STATEMENT,
                    {"org": scope.org, "project": scope.project, "user": scope.user},
                )
            )
        wire: list[str] = []
        fqdns: dict[str, str] = {}
        digest = hashlib.sha256()
        for row in rows:
            name = str(row.tool_name)
            if name in fqdns or not TOOL_NAME_PATTERN.fullmatch(name):
                continue  # unique and valid by the registry's rules; a damaged row is skipped
            deprecated = (
                (row.deprecation_message or "deprecated") if row.deprecated_at is not None else None
            )
            description = describe(str(row.display_name), row.description, row.intent, deprecated)
            schema = input_schema(row.parameters_schema)
            fqdns[name] = str(row.fqdn)
            title = str(row.display_name)
            text = json.dumps(
                {"name": name, "title": title, "description": description, "inputSchema": schema},
                ensure_ascii=False,
                separators=(",", ":"),
            )
            wire.append(text)
            digest.update(f"{row.fqdn}@{row.version}:{text}".encode())
        return ToolListing(tuple(wire), fqdns, digest.hexdigest())
