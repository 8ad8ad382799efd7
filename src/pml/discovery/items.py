"""What discovery indexes of each tool and capability, and what it answers with.

    item = tool_item(upstream_tool)            # key, texts to embed and to index, entry
    result = render(hit, routing="local")      # one pml_discover result (SPEC §7)
    hidden(policy, request, hit)               # the policy forbids it (or a tool it uses)

A tool is described by its server, its name (identifier words split) and its description;
its parameter names are searchable words too. A capability by its intent, display name,
description and the tools it uses. The text embedded is shorter than the text indexed: the
model reads at most 256 word pieces, and the first sentences of a description carry what
it is for.

An item may have ``views``, more texts embedded on their own that find it too (its cosine
is the best of its vectors): a tool's name with its server and each sentence of its
description (the server says what the tool works on: "memory", "git"; a sentence of a long
description matches a request better alone than diluted in the whole), and a capability's
remembered
intents — the other ways it was asked for (at most ``MAX_VIEWS``, newest first; its
original intent is already part of its main text).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from pml.discovery.index import Entry, Hit
from pml.discovery.lean import lean_schema, short_description
from pml.discovery.text import words
from pml.discovery.views import MAX_VIEWS
from pml.registry.fqdn import is_fqdn
from pml.registry.reliability import Reliability
from pml.storage.discovery_repo import CapabilityRow
from pml.upstream.base import UpstreamTool

if TYPE_CHECKING:
    from pml.policy.enforcer import PolicyEnforcer, RequestPolicy

EMBED_DESCRIPTION_CHARS: Final = 500
INDEX_DESCRIPTION_CHARS: Final = 4000
SCORE_DECIMALS: Final = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True, slots=True)
class Item:
    """One indexable thing: its entry, the text to embed and the text to index."""

    entry: Entry
    embed_text: str
    index_text: str
    views: tuple[str, ...] = ()


def text_hash(text: str) -> str:
    """SHA-256 of an embedded text (with the model id, it decides when to re-embed)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def call_name(namespace: str, name: str) -> str:
    """``mcp.server.tool`` (``mcp.server["get-sum"]`` for a name that is not an identifier)."""
    return f"mcp.{namespace}.{name}" if name.isidentifier() else f'mcp.{namespace}["{name}"]'


def tool_key(server: str, tool: str) -> str:
    return f"tool:{server}:{tool}"


def capability_key(fqdn: str) -> str:
    return f"capability:{fqdn}"


def _identifier(name: str) -> str:
    return " ".join(words(name))


def _sentences(text: str) -> list[str]:
    """The sentences of a description worth a view of their own (the first always)."""
    parts = [part.strip() for part in _SENTENCE_END.split(text[:INDEX_DESCRIPTION_CHARS])]
    kept = [part for index, part in enumerate(parts) if part and (index == 0 or len(part) > 10)]
    return [part[:EMBED_DESCRIPTION_CHARS] for part in kept[:MAX_VIEWS]]


def _folded(text: str) -> str:
    return " ".join(text.casefold().split())


def remembered_intents(row: CapabilityRow) -> tuple[str, ...]:
    """A capability's remembered intents other than its original one: distinct, newest
    first, cut to what is embedded, at most ``MAX_VIEWS``."""
    seen = {_folded(row.intent or "")}
    kept: list[str] = []
    for raw in row.intents:
        text = str(raw).strip()[:EMBED_DESCRIPTION_CHARS]
        folded = _folded(text)
        if folded and folded not in seen:
            seen.add(folded)
            kept.append(text)
            if len(kept) >= MAX_VIEWS:
                break
    return tuple(kept)


def _servers(tools_used: list[str]) -> tuple[str, ...]:
    """The upstream servers among ``server:tool`` addresses (of the first 20)."""
    servers: list[str] = []
    for address in tools_used[:20]:
        server, _, tool = str(address).partition(":")
        if server and tool:
            servers.append(server)
    return tuple(dict.fromkeys(servers))


def _parameter_names(schema: object) -> list[str]:
    if not isinstance(schema, dict):
        return []
    properties = cast("dict[str, Any]", schema).get("properties")
    if not isinstance(properties, dict):
        return []
    return [str(name) for name in cast("dict[str, Any]", properties)][:50]


def tool_item(tool: UpstreamTool) -> Item:
    """The item of an upstream tool (visible to every caller)."""
    description = (tool.definition.description or "").strip()
    name = _identifier(tool.name)
    embed_text = f"{name}: {description[:EMBED_DESCRIPTION_CHARS]}" if description else name
    parameters = " ".join(_parameter_names(tool.definition.input_schema))
    index_text = f"{tool.server} {name} {description[:INDEX_DESCRIPTION_CHARS]} {parameters}"
    views = tuple(f"{name} ({tool.server}): {part}" for part in _sentences(description))
    entry = Entry(
        key=tool_key(tool.server, tool.name),
        kind="tool",
        text_hash=text_hash(embed_text),
        payload=tool,
        servers=(tool.server,),
    )
    return Item(entry, embed_text, index_text, views or (f"{name} ({tool.server})",))


def capability_item(row: CapabilityRow) -> Item:
    """The item of a capability, with its scope and usage."""
    intent = (row.intent or "").strip()
    description = (row.description or "").strip()
    name = _identifier(row.display_name) if row.named else ""
    tools = " ".join(_identifier(tool) for tool in row.tools_used[:20])
    lead = intent or description or name or tools
    embed_parts = [lead[:EMBED_DESCRIPTION_CHARS]]
    if description and description != lead:
        embed_parts.append(description[:EMBED_DESCRIPTION_CHARS])
    if name:
        embed_parts.append(name)
    embed_text = ". ".join(part for part in embed_parts if part)
    remembered = remembered_intents(row)
    # remembered intents before the (unbounded) description: a long one never pushes them out
    index_text = " ".join(
        (intent[:INDEX_DESCRIPTION_CHARS], name, *remembered, description, tools)
    )[: INDEX_DESCRIPTION_CHARS * 2]
    entry = Entry(
        key=capability_key(row.fqdn),
        kind="capability",
        text_hash=text_hash(embed_text),
        payload=row,
        org=row.org,
        project=row.project,
        visibility=row.visibility,
        created_by=row.created_by,
        usage_count=row.usage_count,
        success_count=row.success_count,
        deprecated=row.deprecation is not None,
        recent=Reliability.of(row.recent_outcomes, row.recent_runs, row.recent_latency_ms),
        servers=_servers(row.tools_used),
    )
    return Item(entry, embed_text, index_text, remembered)


def below_replacements(hits: list[Hit]) -> list[Hit]:
    """``hits`` with each deprecated capability placed after its replacement when both are
    found (the score malus alone could leave a much better-matching one above it)."""
    order = [hit.entry.key for hit in hits]
    for hit in hits:
        payload = hit.entry.payload
        if not isinstance(payload, CapabilityRow) or payload.deprecation is None:
            continue
        replacement = payload.deprecation.get("replacedBy")
        key = capability_key(replacement) if replacement else None
        if key in order and order.index(key) > order.index(hit.entry.key):
            order.remove(hit.entry.key)
            order.insert(order.index(key) + 1, hit.entry.key)
    by_key = {hit.entry.key: hit for hit in hits}
    return [by_key[key] for key in order]


def render(hit: Hit, *, routing: str) -> dict[str, Any]:
    """One ``pml_discover`` result: everything needed to call it (SPEC §7), lean — the
    description's first sentences, the schema without ``$schema`` and the like, the score
    to 3 decimals, a capability's success rate once it ran and its recent runs when there
    are some (``pml.discovery.lean``)."""
    payload = hit.entry.payload
    score = round(hit.score, SCORE_DECIMALS)
    if isinstance(payload, UpstreamTool):
        return {
            "kind": "tool",
            "name": payload.address,
            "callName": call_name(payload.server, payload.name),
            "description": short_description(payload.definition.description or ""),
            "inputSchema": lean_schema(payload.definition.input_schema),
            "score": score,
            "routing": routing,
        }
    row = cast("CapabilityRow", payload)
    usage = hit.entry.usage_count
    result: dict[str, Any] = {
        "kind": "capability",
        "name": row.display_name,
        # unnamed capabilities are not tools: snippets reach them by FQDN
        "callName": call_name(row.namespace, row.action) if row.named else f'mcp["{row.fqdn}"]',
        "fqdn": row.fqdn,
        "description": short_description((row.description or "").strip() or row.intent or ""),
        "inputSchema": lean_schema(row.parameters_schema),
        "score": score,
        "routing": row.routing,
        "usage_count": usage,
    }
    if usage:
        result["success_rate"] = round(hit.entry.success_count / usage, 4)
    if hit.entry.recent.runs:
        result |= hit.entry.recent.fields()
    if row.named:
        result["toolName"] = row.tool_name
    return result | (row.deprecation or {})


def hidden(policy: PolicyEnforcer, request: RequestPolicy, hit: Hit) -> bool:
    """A tool the policy forbids, or a capability that uses one."""
    payload = hit.entry.payload
    if isinstance(payload, UpstreamTool):
        return policy.hides(request, payload.server, payload.name)
    used = cast("CapabilityRow", payload).tools_used
    for address in used:
        server, _, tool = address.partition(":")
        if tool and not is_fqdn(address) and policy.hides(request, server, tool):
            return True
    return False
