"""Suggestion mode of ``pml_execute``: what to call for an intent, with code to start from.

    found = await suggestions("read a json file", scope=scope, registry=registry, pool=pool)
    found[0]["callName"], found[0]["template"]

A plain lexical ranking (shared words between the intent and each tool's or named
capability's name and description), until discovery (``pml_discover``) ranks them better.
Each suggestion carries a ready ``callName`` and a code template; nothing runs.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from pml.registry.models import CapabilityRecord, ListQuery
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.upstream.base import UpstreamPool, UpstreamTool

MAX_SUGGESTIONS = 5
MAX_CAPABILITIES_SCANNED = 500
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with", "my"})


def _words(*texts: str | None) -> set[str]:
    words: set[str] = set()
    for text in texts:
        if text:
            spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
            words.update(w for w in _WORD.findall(spaced.lower()) if w not in _STOP)
    return words


def _score(intent: set[str], candidate: set[str]) -> float:
    if not intent or not candidate:
        return 0.0
    shared = sum(1.0 if w in candidate else 0.5 for w in intent if _near(w, candidate))
    return round(shared / len(intent), 4)


def _near(word: str, candidate: set[str]) -> bool:
    return word in candidate or any(
        len(word) > 3 and len(other) > 3 and (other.startswith(word) or word.startswith(other))
        for other in candidate
    )


def call_name(namespace: str, name: str) -> str:
    """``mcp.server.tool`` (``mcp.server["get-sum"]`` for a name that is not an identifier)."""
    return f"mcp.{namespace}.{name}" if name.isidentifier() else f'mcp.{namespace}["{name}"]'


def template(call: str, schema: dict[str, Any]) -> str:
    """A snippet calling ``call`` with its required parameters taken from ``args``."""
    required = schema.get("required")
    names = (
        [n for n in cast("list[Any]", required) if isinstance(n, str)]
        if isinstance(required, list)
        else []
    )
    kwargs = ", ".join(f"{n}=args[{json.dumps(n)}]" for n in names if n.isidentifier())
    return f"result = await {call}({kwargs})\nreturn result"


async def suggestions(
    intent: str, *, scope: Scope, registry: CapabilityRegistry, pool: UpstreamPool
) -> list[dict[str, Any]]:
    """The best tools and named capabilities for ``intent``, best first."""
    wanted = _words(intent)
    ranked: list[tuple[float, str, dict[str, Any]]] = []
    for tool in await pool.list_tools():
        score = _score(wanted, _words(tool.server, tool.name, tool.definition.description))
        if score > 0:
            ranked.append((score, tool.address, _tool_entry(tool, score)))
    page = await registry.list(scope, ListQuery(named_only=True, limit=MAX_CAPABILITIES_SCANNED))
    for record in page.items:
        if record.record_type != "capability":
            continue
        texts = (record.display_name, record.intent, record.description, *record.tools_used)
        score = _score(wanted, _words(*texts))
        if score > 0:
            ranked.append((score, record.fqdn, _capability_entry(record, score)))
    ranked.sort(key=lambda item: (-item[0], item[1]))
    return [entry for _, _, entry in ranked[:MAX_SUGGESTIONS]]


def _tool_entry(tool: UpstreamTool, score: float) -> dict[str, Any]:
    call = call_name(tool.server, tool.name)
    schema = dict(tool.definition.input_schema)
    return {
        "kind": "tool",
        "name": tool.address,
        "callName": call,
        "description": tool.definition.description or "",
        "inputSchema": schema,
        "score": score,
        "template": template(call, schema),
    }


def _capability_entry(record: CapabilityRecord, score: float) -> dict[str, Any]:
    call = call_name(record.namespace, record.action)
    return {
        "kind": "capability",
        "name": record.display_name,
        "callName": call,
        "toolName": record.tool_name,
        "fqdn": record.fqdn,
        "description": record.description or record.intent or "",
        "inputSchema": record.parameters_schema,
        "score": score,
        "routing": record.routing,
        "usage_count": record.usage_count,
        "success_rate": record.success_rate,
        "template": template(call, record.parameters_schema),
    }
