"""The fixed tools of the gateway (SPEC §3): names, descriptions and input schemas.

The schemas come from pydantic models, so what an agent is told and what the gateway
checks never drift apart::

    tool = STATIC_TOOLS["cap_list"]          # an mcp_types.Tool
    params = parse_params(DiscoverParams, {"intent": "read a file"})  # or INVALID_INPUT

``$defs`` references are inlined, ``title`` noise is dropped and ``X | None = None``
fields are shown as optional ``X`` (several clients in use cannot follow ``$ref``).

``tools/list`` is part of every agent request, so the eight tools are terse: together at
most 1 000 tokens (cl100k; ``benchmarks/context.py``, ``tests/gateway/test_schemas_tokens.py``).
Field docs are given only where the name and the tool's description do not say it, and
rules checked on every call but not worth their tokens are not advertised (see
``_UNADVERTISED``): validation is the models', exactly as strict.
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


# Field docs, only where the name and the tool's description do not already say it: every
# word here is read by the agent on every request (``tools/list`` is part of its context).
DOCS: dict[str, str] = {
    "continue_workflow": "Resume a run that waited for a person's approval.",
    "pattern": "Glob on the name, e.g. fs:*",
}
EXECUTE_DOCS: dict[str, str] = {
    "intent": "What you want, in plain words.",
    "name": "Save under this name (with update: the capability to give a new version).",
}


# Checked on every call but not advertised: the bounds every free text shares and the
# text-hygiene rules (no NUL, no control characters). Repeated on each text field they cost
# an agent's context more tokens than they help it; a value that breaks one gets
# INVALID_INPUT naming the field and the rule. Objects are closed by the models (an unknown
# field is INVALID_INPUT naming it), and an open one is the JSON Schema default.
_UNADVERTISED: Final[frozenset[tuple[str, type, object]]] = frozenset(
    {
        ("minLength", int, 1),
        ("maxLength", int, TEXT_MAX),
        ("maxLength", int, 1_000),
        ("pattern", str, r"^[^\x00]*$"),
        ("pattern", str, r"^[^\x00-\x1f\x7f]*$"),
        ("additionalProperties", bool, False),
        ("additionalProperties", bool, True),
        ("maximum", int, 2**31 - 1),  # a database integer's bound: no agent reaches it
        # an option that is off or zero unless given says nothing by its default
        ("default", bool, False),
        ("default", int, 0),
        ("default", float, 0.0),
    }
)


def json_schema(model: type[BaseModel], docs: Mapping[str, str] = DOCS) -> dict[str, Any]:
    """The model's JSON schema as advertised: self-contained, with a description only for
    the fields ``docs`` names (see ``DOCS``)."""
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
        if key in ("title", "description") or _unadvertised(key, value):
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


def _unadvertised(key: str, value: object) -> bool:
    return isinstance(value, (bool, int, float, str)) and (key, type(value), value) in _UNADVERTISED


def _describe(schema: object, doc: str | None) -> object:
    if doc is None or not isinstance(schema, dict):
        return schema
    return {"description": doc, **cast(dict[str, Any], schema)}


def _tool(
    name: str,
    description: str,
    params: type[BaseModel],
    *,
    read_only: bool,
    docs: Mapping[str, str] | None = None,
) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        description=description,
        input_schema=json_schema(params, {**DOCS, **(docs or {})}),
        # readOnlyHint lets a client run a lookup without asking; the absent hints keep
        # their defaults (a client asks before the tools that change something)
        annotations=mcp_types.ToolAnnotations(read_only_hint=True) if read_only else None,
    )


STATIC_TOOLS: dict[str, mcp_types.Tool] = {
    tool.name: tool
    for tool in (
        _tool(
            "pml_discover",
            "Find MCP tools and saved capabilities for an intent, best first; each result "
            "gives its callName and inputSchema.",
            DiscoverParams,
            read_only=True,
        ),
        _tool(
            "pml_execute",
            "Run Python `code` calling MCP tools (`await mcp.<server>.<tool>(key=value)`); "
            "inputs are in `args`; `return` the result. Success saves it as a reusable "
            "capability: run a saved one by `capability` name with `args`. Neither: "
            "suggestions for the intent.",
            ExecuteParams,
            read_only=False,
            docs=EXECUTE_DOCS,
        ),
        _tool(
            "cap_list",
            "List saved capabilities: {items, total}.",
            ListParams,
            read_only=True,
        ),
        _tool(
            "cap_lookup",
            "A capability's identity, usage, routing and version by name, alias, FQDN or "
            "tool name (optional @version).",
            LookupParams,
            read_only=True,
        ),
        _tool(
            "cap_whois",
            "The full record of an FQDN, with its aliases and version count.",
            WhoisParams,
            read_only=True,
        ),
        _tool(
            "cap_rename",
            "Rename a capability (the old name stays an alias) or set its description, tags "
            "(replaced), visibility or routing.",
            RenameParams,
            read_only=False,
        ),
        _tool(
            "cap_history",
            "A capability's versions, newest first, each with a diff to the one before; "
            "`before` pages.",
            HistoryParams,
            read_only=True,
        ),
        _tool(
            "cap_curate",
            "Name unnamed capabilities: suggest (changes nothing), auto (applies confident "
            "suggestions) or apply `renames`.",
            CurateParams,
            read_only=False,
        ),
    )
}


def tool_wire(tool: mcp_types.Tool) -> str:
    """``tool`` as the compact JSON text it is sent as."""
    data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


# The fixed tools as sent (the stdio lane splices them into its tools/list answers).
STATIC_WIRE: Final = tuple(tool_wire(tool) for tool in STATIC_TOOLS.values())
