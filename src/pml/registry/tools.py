"""The ``cap_*`` tools (SPEC §6.5): validated arguments in, SPEC-shaped JSON out.

The MCP gateway and the CLI both call these, so an agent and a person get the same fields
and the same errors::

    tools = CapTools(registry)
    await tools.call("cap:list", scope, {"pattern": "fs:*"})   # {"items": [...], "total": N}
    await tools.call("cap_lookup", scope, {"name": "fs:read_json@v1"})

Arguments are checked strictly (no type coercion, unknown keys refused) and every problem
is one ``INVALID_INPUT`` error naming the fields.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pml import cpu_process
from pml.errors import InvalidInput, NotFound
from pml.registry.fqdn import message_value
from pml.registry.models import CapabilityRecord, ListQuery, VersionRecord
from pml.registry.patterns import glob_to_like
from pml.registry.reliability import Reliability
from pml.registry.routing import Routing
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityRegistry, RenameChanges
from pml.registry.versions import unified_diff

Name = Annotated[str, Field(min_length=1, max_length=10_000)]
# A filter value: no control characters (NUL would reach PostgreSQL, which refuses it).
Filter = Annotated[str, Field(max_length=1_000, pattern=r"^[^\x00-\x1f\x7f]*$")]
# the stored recent-runs columns: answers show what they mean (``reliability_fields``)
RECENT_COLUMNS = frozenset({"recent_outcomes", "recent_runs", "recent_latency_ms"})
SUMMARY_OMITS = frozenset({"code", *RECENT_COLUMNS})  # and the code
# cap_history shows the newest versions only: each carries a diff of up to twice the code
# (~250 KB), and versions accumulate without end (one answer of 1 000 was ~250 MB).
MAX_HISTORY_VERSIONS = 20
# Versions larger than this in all are diffed by the gateway's child process (pml.cpu_process).
INLINE_DIFF_CHARS = 64_000


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


P = TypeVar("P", bound=BaseModel)


class ListParams(_Params):
    pattern: Filter | None = None
    named_only: bool = False
    unnamed_only: bool = False
    tags: Annotated[list[Filter], Field(max_length=64)] | None = None
    created_by: Filter | None = None
    visibility: Visibility | None = None
    sort_by: Literal["usage", "name", "created"] = "usage"
    order: Literal["asc", "desc"] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    offset: Annotated[int, Field(ge=0, le=10_000_000)] = 0
    archived: bool = False  # the archived capabilities instead of the active ones


class LookupParams(_Params):
    name: Name


class WhoisParams(_Params):
    fqdn: Name


class RenameParams(_Params):
    name: Name
    new_name: str | None = None  # checked by validate_name: bad names are INVALID_NAME
    description: str | None = None
    tags: list[str] | None = None
    visibility: Visibility | None = None
    routing: Routing | None = None


class HistoryParams(_Params):
    name: Name
    before: Annotated[int, Field(ge=2, le=2**31 - 1)] | None = None  # older versions only


def parse_params(model: type[P], raw: object) -> P:
    """``raw`` validated as ``model``, or ``INVALID_INPUT`` listing each bad field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"arguments must be an object, not {type(raw).__name__}")
    try:
        return model.model_validate(dict(raw))  # pyright: ignore[reportUnknownArgumentType]
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in issue['loc']) or 'arguments'}: {issue['msg']}"
            for issue in error.errors(include_url=False)
        ]
        fields = sorted({str(issue["loc"][0]) for issue in error.errors() if issue["loc"]})
        raise InvalidInput("Invalid input: " + "; ".join(problems), fields=fields) from None


def reliability_fields(record: CapabilityRecord) -> dict[str, Any]:
    """How its last runs went: ``recent_runs``, ``recent_success_rate``,
    ``recent_latency_ms``, and ``failing: true`` when it keeps failing (SPEC §6.5)."""
    return Reliability.of_record(record).fields()


def summary(record: CapabilityRecord) -> dict[str, Any]:
    """A record as listings show it (everything but the code), with how its last runs went."""
    fields = {k: v for k, v in record.to_dict().items() if k not in SUMMARY_OMITS}
    return fields | reliability_fields(record)


async def history_answer(
    fqdn: str,
    name: str,
    versions: Sequence[VersionRecord],
    shown: int | None = None,
    tenant: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``cap_history``'s JSON: ``versions`` (newest first; the first ``shown``), each with
    its diff to the one before it. Diffing is pure Python (~20 ms for 90 KB versions): when
    the code is large, the gateway's child process does it, in ``tenant``'s turn."""
    entries: list[dict[str, Any]] = []
    pairs: list[tuple[str, str, str, str]] = []
    for index, version in enumerate(versions[:shown]):
        previous = versions[index + 1] if index + 1 < len(versions) else None
        old = (previous.code or previous.code_url or "") if previous else ""
        new = version.code or version.code_url or ""
        pairs.append((old, new, f"{name}@v{version.version - 1}", f"{name}@v{version.version}"))
        entries.append(
            {
                "version": version.version,
                "version_tag": version.version_tag,
                "updated_at": version.updated_at.isoformat(),
                "updated_by": version.updated_by,
                "change_summary": version.change_summary,
            }
        )
    if sum(len(old) + len(new) for old, new, _, _ in pairs) > INLINE_DIFF_CHARS:
        diffs = await cpu_process.run("diffs", (pairs,), tenant)
    else:
        diffs = [unified_diff(*pair) for pair in pairs]
    for entry, diff in zip(entries, diffs, strict=True):
        entry["diff"] = diff
    return {"fqdn": fqdn, "display_name": name, "versions": entries}


class CapTools:
    """The ``cap_list``, ``cap_lookup``, ``cap_whois``, ``cap_rename`` and ``cap_history`` tools."""

    def __init__(self, registry: CapabilityRegistry) -> None:
        self._registry = registry
        self._tools: dict[str, Callable[[Scope, object], Awaitable[dict[str, Any]]]] = {
            "cap_list": self.list,
            "cap_lookup": self.lookup,
            "cap_whois": self.whois,
            "cap_rename": self.rename,
            "cap_history": self.history,
        }

    @property
    def names(self) -> list[str]:
        """The tool names, in the ``cap_*`` spelling."""
        return list(self._tools)

    async def call(self, tool: str, scope: Scope, arguments: object) -> dict[str, Any]:
        """Run one tool by name; the seed spelling ``cap:list`` is accepted too."""
        handler = self._tools.get(tool.replace(":", "_", 1))
        if handler is None:
            raise NotFound(f"Unknown tool: {message_value(tool)}")
        return await handler(scope, arguments)

    async def list(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """``{items, total}``: the capabilities ``scope`` may see, filtered and sorted."""
        params = parse_params(ListParams, arguments)
        if params.named_only and params.unnamed_only:
            raise InvalidInput(
                "named_only and unnamed_only cannot both be true",
                fields=["named_only", "unnamed_only"],
            )
        order = params.order or ("asc" if params.sort_by == "name" else "desc")
        query = ListQuery(
            like_pattern=glob_to_like(params.pattern) if params.pattern is not None else None,
            named_only=params.named_only,
            unnamed_only=params.unnamed_only,
            tags=tuple(params.tags or ()),
            created_by=params.created_by,
            visibility=params.visibility,
            sort_by=params.sort_by,
            descending=order == "desc",
            limit=params.limit,
            offset=params.offset,
            archived=params.archived,
        )
        page = await self._registry.list(scope, query)
        return {"items": [summary(record) for record in page.items], "total": page.total}

    async def lookup(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """What a name resolves to: identity, usage, routing, version (and alias warning)."""
        params = parse_params(LookupParams, arguments)
        resolved = await self._registry.resolve(scope, params.name)
        record, version = resolved.record, resolved.version
        result: dict[str, Any] = {
            "fqdn": record.fqdn,
            "display_name": record.display_name,
            "tool_name": record.tool_name
            if record.named and record.record_type == "capability"
            else None,
            "description": record.description,
            "usage_count": record.usage_count,
            "success_rate": record.success_rate,
            **reliability_fields(record),
            # An explicit override applies to every version; otherwise each version's own.
            "routing": record.routing_override or version.routing,
            "type": record.record_type,
            "version": version.version,
            "version_tag": version.version_tag,
            "visibility": record.visibility,
        }
        if version.code_url is not None:
            result["code_url"] = version.code_url
        if resolved.deprecated_alias is not None:
            result["deprecatedAlias"] = resolved.deprecated_alias
        return result | (record.deprecation or {})

    async def whois(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """The full record behind an FQDN, its aliases, its number of versions and the
        intents it was asked for with (newest first)."""
        params = parse_params(WhoisParams, arguments)
        found = await self._registry.whois(scope, params.fqdn)
        calls = await self._registry.usage_of(scope, found.record.fqdn)
        intents = await self._registry.intents_of(found.record.fqdn)
        record = {
            key: value for key, value in found.record.to_dict().items() if key not in RECENT_COLUMNS
        }
        return {
            **record,
            **reliability_fields(found.record),
            "aliases": [
                {"alias": alias.alias, "created_at": alias.created_at.isoformat()}
                for alias in found.aliases
            ],
            "version_count": found.version_count,
            # Calls made from the caller's own org/project (tool_usage rows), never others'.
            "tool_usage": calls.to_dict() if calls is not None else None,
            "intents": [intent.to_dict() for intent in intents],
        } | (found.record.deprecation or {})

    async def rename(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """Rename and/or change metadata; returns the updated record."""
        params = parse_params(RenameParams, arguments)
        changes = RenameChanges(
            new_name=params.new_name,
            description=params.description,
            tags=params.tags,
            visibility=params.visibility,
            routing=params.routing,
        )
        return (await self._registry.rename(scope, params.name, changes)).to_dict()

    async def history(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """Versions, newest first, each with a unified diff to its predecessor, and the
        intents remembered across them (newest first)."""
        params = parse_params(HistoryParams, arguments)
        # one more than shown: the oldest shown is diffed against it
        record, versions, alias = await self._registry.history(
            scope, params.name, MAX_HISTORY_VERSIONS + 1, params.before
        )
        result = await history_answer(
            record.fqdn, record.display_name, versions, MAX_HISTORY_VERSIONS, scope.tenant
        )
        if len(versions) > MAX_HISTORY_VERSIONS:
            result["truncated"] = True  # ``before: next_before`` shows the older ones
            result["next_before"] = versions[MAX_HISTORY_VERSIONS - 1].version
        intents = await self._registry.intents_of(record.fqdn)
        result["intents"] = [intent.to_dict() for intent in intents]
        if alias is not None:
            result["deprecatedAlias"] = alias
        return result
