"""The fixed tools of the gateway (SPEC §3): names, descriptions and input schemas.

The schemas come from pydantic models, so what an agent is told and what the gateway
checks never drift apart::

    tool = STATIC_TOOLS["cap_list"]          # an mcp_types.Tool
    params = parse_params(DiscoverParams, {"intent": "read a file"})  # or INVALID_INPUT

``$defs`` references are inlined, ``title`` noise is dropped and ``X | None = None``
fields are shown as optional ``X`` (several clients in use cannot follow ``$ref``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self, TypeVar, cast

import mcp_types
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pml.errors import InvalidInput
from pml.registry.routing import Routing
from pml.registry.tools import HistoryParams, ListParams, LookupParams, RenameParams, WhoisParams
from pml.registry.versions import normalise_tag
from pml.wire_json import MAX_JSON_DEPTH, value_too_deep

A = TypeVar("A")
TEXT_MAX: Final = 10_000
Text = Annotated[str, Field(min_length=1, max_length=TEXT_MAX)]
# Text that is stored (an intent becomes the capability's): no NUL, which PostgreSQL refuses.
StoredText = Annotated[str, Field(min_length=1, max_length=TEXT_MAX, pattern=r"^[^\x00]*$")]


def within_depth(arguments: A) -> A:
    """Tool ``arguments`` as given, or ``INVALID_INPUT`` when they nest more than
    ``MAX_JSON_DEPTH`` levels (the arguments object is the first), checked without recursion
    before anything walks them."""
    if value_too_deep(arguments, MAX_JSON_DEPTH):
        raise InvalidInput(
            f"arguments are nested more than {MAX_JSON_DEPTH} levels deep", field="arguments"
        )
    return arguments


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ExecuteOptions(_Params):
    timeout_ms: Annotated[int, Field(ge=1, le=3_600_000)] | None = None


class ContinueWorkflow(_Params):
    workflow_id: Text
    approved: bool
    # The grant to issue when the agent may approve ([permissions] agent_may_approve);
    # otherwise a person's decision chooses it and this is ignored (SPEC §10.5).
    grant: Literal["once", "session", "always"] = "once"


class ExecuteParams(_Params):
    """``pml_execute`` input (SPEC §5)."""

    intent: StoredText
    code: str | None = None
    capability: Text | None = None
    args: dict[str, Any] | None = None
    name: StoredText | None = None
    update: bool = False
    version_tag: Annotated[str, Field(max_length=64)] | None = None
    routing: Routing | None = None
    options: ExecuteOptions | None = None
    continue_workflow: ContinueWorkflow | None = None

    @field_validator("intent")
    @classmethod
    def _not_blank(cls, intent: str) -> str:
        if not intent.strip():
            raise ValueError("must not be blank")
        return intent

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if self.code is not None and self.capability is not None:
            raise ValueError("give at most one of 'code' and 'capability'")
        if self.version_tag is not None:
            if not self.update:
                raise ValueError("version_tag tags a new version: it needs update: true")
            if normalise_tag(self.version_tag) is None:
                raise ValueError("version_tag must be a semantic version such as v1.2.0")
        return self


class DiscoverParams(_Params):
    """``pml_discover`` input (SPEC §7)."""

    intent: Text
    limit: Annotated[int, Field(ge=1, le=50)] = 5
    kind: Literal["tool", "capability", "all"] = "all"
    min_score: Annotated[float, Field(ge=0, le=1)] = 0.0

    @field_validator("intent")
    @classmethod
    def _not_blank(cls, intent: str) -> str:
        if not intent.strip():
            raise ValueError("must not be blank")
        return intent


class CurateFilter(_Params):
    unnamed_only: bool = True
    min_usage: Annotated[int, Field(ge=0)] = 0


class CurateRename(_Params):
    id: Text
    name: Text


class CurateParams(_Params):
    """``cap_curate`` input (SPEC §6.5)."""

    mode: Literal["suggest", "auto", "apply"] = "suggest"
    filter: CurateFilter | None = None
    renames: Annotated[list[CurateRename], Field(max_length=500)] | None = None

    @model_validator(mode="after")
    def _renames_for_apply(self) -> Self:
        if self.mode == "apply" and not self.renames:
            raise ValueError("mode 'apply' needs 'renames'")
        return self


DOCS: dict[str, str] = {
    "intent": "What you want to achieve, in plain words.",
    "code": "Python snippet; call tools with `await mcp.<server>.<tool>(...)`; `return` a value.",
    "capability": "A capability to run: display name, alias, FQDN or mcp__ns__action[@version].",
    "args": "Arguments: the snippet's `args`, or the capability's parameters.",
    "name": "The capability: display name, alias, FQDN or mcp__ns__action, optional @version.",
    "update": "With name and code: store the code as a new version of that capability.",
    "routing": "Explicit routing override: local or cloud.",
    "options": "Execution options.",
    "timeout_ms": "Wall-time limit of the run, in milliseconds.",
    "continue_workflow": (
        "Resume a workflow that waited for a person's approval (only once a person decided)."
    ),
    "workflow_id": "The workflowId of the approval_required answer.",
    "approved": "true to resume once a person approved; false withdraws the request.",
    "grant": "once, session or always: used only where the gateway lets agents approve.",
    "limit": "Maximum number of results.",
    "kind": "tool, capability or all.",
    "min_score": "Drop results scoring below this (0 to 1).",
    "pattern": "Glob on the display name, e.g. 'fs:*'.",
    "named_only": "Only capabilities with a chosen name.",
    "unnamed_only": "Only capabilities still named unnamed_<hash>.",
    "tags": "Tags that must all be present.",
    "created_by": "Only those created by this user.",
    "visibility": "private, project, org or public.",
    "sort_by": "usage, name or created.",
    "order": "asc or desc (default: asc for name, desc otherwise).",
    "offset": "Results to skip (paging).",
    "fqdn": "The full identity <org>.<project>.<namespace>.<action>.<hash>.",
    "new_name": "The new display name; the old one stays as an alias.",
    "description": "A new description.",
    "mode": "suggest (nothing changes), auto (apply confident suggestions) or apply (renames).",
    "filter": "Which capabilities to consider.",
    "min_usage": "Only capabilities used at least this often.",
    "renames": "For mode apply: the renames to make.",
    "id": "The capability's id or FQDN.",
}


# The bounds every free text shares (1..10 000 characters) are checked on every call but not
# advertised: repeated on each text field they would cost an agent's context more tokens
# than they help it (an overlong value gets INVALID_INPUT naming the field and the limit).
_GENERIC_BOUNDS: Final[dict[str, object]] = {"minLength": 1, "maxLength": TEXT_MAX}
_NO_BOUND: Final = object()


def json_schema(model: type[BaseModel], docs: Mapping[str, str] = DOCS) -> dict[str, Any]:
    """The model's JSON schema, self-contained, with a description per documented field."""
    raw = model.model_json_schema()
    defs = cast(dict[str, Any], raw.pop("$defs", {}))
    raw.pop("description", None)  # the model's docstring is written for developers
    return cast(dict[str, Any], _clean(raw, defs, docs))


def _clean(node: object, defs: Mapping[str, Any], docs: Mapping[str, str]) -> object:
    if isinstance(node, list):
        return [_clean(item, defs, docs) for item in cast(list[object], node)]
    if not isinstance(node, dict):
        return node
    schema = cast(dict[str, Any], node)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _clean(defs[ref.removeprefix("#/$defs/")], defs, docs)
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and "default" in schema and schema["default"] is None:
        options = [o for o in cast(list[Any], any_of) if o != {"type": "null"}]
        if len(options) == 1:  # `X | None = None`: simply an optional X
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
            return _clean({**options[0], **rest}, defs, docs)
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or _GENERIC_BOUNDS.get(key, _NO_BOUND) == value:
            continue
        if key == "properties":
            properties = cast(dict[str, Any], value)
            cleaned[key] = {
                name: _describe(_clean(prop, defs, docs), docs.get(name))
                for name, prop in properties.items()
            }
        else:
            cleaned[key] = _clean(value, defs, docs)
    return cleaned


def _describe(schema: object, doc: str | None) -> object:
    if doc is None or not isinstance(schema, dict):
        return schema
    fields = cast(dict[str, Any], schema)
    return fields if "description" in fields else {"description": doc, **fields}


def _tool(
    name: str,
    title: str,
    description: str,
    params: type[BaseModel],
    *,
    read_only: bool,
    docs: Mapping[str, str] | None = None,
) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema=json_schema(params, {**DOCS, **(docs or {})}),
        annotations=mcp_types.ToolAnnotations(read_only_hint=read_only, open_world_hint=False),
    )


STATIC_TOOLS: dict[str, mcp_types.Tool] = {
    tool.name: tool
    for tool in (
        _tool(
            "pml_discover",
            "Discover tools and capabilities",
            "Find upstream tools and learned capabilities for an intent. Each result carries "
            "what is needed to call it (callName, inputSchema) without another round trip.",
            DiscoverParams,
            read_only=True,
        ),
        _tool(
            "pml_execute",
            "Execute code or a capability",
            "Run a Python snippet that calls MCP tools (`await mcp.<server>.<tool>(...)`), call "
            "a capability by name (`capability`), or, with neither, get suggestions for the "
            "intent. A successful snippet is saved as a reusable capability.",
            ExecuteParams,
            read_only=False,
            docs={"name": "Display name of the new capability, or the one to update (update)."},
        ),
        _tool(
            "cap_list",
            "List capabilities",
            "List the capabilities visible in your scope, filtered and sorted: {items, total}.",
            ListParams,
            read_only=True,
        ),
        _tool(
            "cap_lookup",
            "Look up a capability",
            "Resolve a name (display name, alias, FQDN, mcp__ns__action, optional @version) "
            "to its identity, usage, routing and version.",
            LookupParams,
            read_only=True,
        ),
        _tool(
            "cap_whois",
            "Capability record",
            "The full record behind an FQDN, with its aliases and number of versions.",
            WhoisParams,
            read_only=True,
        ),
        _tool(
            "cap_rename",
            "Rename a capability",
            "Rename a capability and/or change its description, tags, visibility or routing. "
            "The old name keeps working as an alias.",
            RenameParams,
            read_only=False,
            docs={"tags": "The new tags (they replace the current ones)."},
        ),
        _tool(
            "cap_history",
            "Capability versions",
            "The versions of a capability, newest first, each with a unified diff to the "
            "previous one.",
            HistoryParams,
            read_only=True,
        ),
        _tool(
            "cap_curate",
            "Curate capability names",
            "Suggest names for unnamed capabilities (mode suggest), apply the confident ones "
            "(auto), or apply given renames (apply).",
            CurateParams,
            read_only=False,
            docs={"name": "The new display name."},
        ),
    )
}


def tool_wire(tool: mcp_types.Tool) -> str:
    """``tool`` as the compact JSON text it is sent as."""
    data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


# The fixed tools as sent (the stdio lane splices them into its tools/list answers).
STATIC_WIRE: Final = tuple(tool_wire(tool) for tool in STATIC_TOOLS.values())
