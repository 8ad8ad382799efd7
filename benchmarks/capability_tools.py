"""Capabilities as MCP tools, end to end over stdio: listing 5 000 of them, and calling one.

    python benchmarks/capability_tools.py [--capabilities 5000] [--n 1000] [--mode auto|legacy]
                                          [--budget 1000000]

Fills a fresh SQLite database with N named capabilities in one scope, starts
``pml serve --stdio`` on it with an SDK client, then measures:

- ``list_ms``: one ``tools/list`` answered to a plain JSON-RPC client on the gateway's
  stdin/stdout (request written, whole answer read and parsed with ``json``), median of 20
  after the first (``list_cold_ms``: the first, which builds the cached listing);
- ``list_sdk_client_ms``: the same through the SDK client, which also validates every tool
  into pydantic models on its side (most of this figure for thousands of tools);
- ``tool_call_p50_ms``: ``tools/call mcp__bench__add_0`` (the capability tool);
- ``execute_by_name_p50_ms``: ``pml_execute {capability: "bench:add_0"}`` of the same one,
  alternating one by one with the tool calls;
- ``code_run_p50_ms``: the same code run by the sandbox engine alone, in this process.

``--budget`` is ``[gateway] capability_tools_budget`` (tokens of capability tools listed;
default: large enough to list all of them, the case this benchmark measures; the shipped
default lists the most used that fit 4 500 tokens, see ``benchmarks/context.py``).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import PML, pml_stdio, sqlite_url, write_config
from pml.config import SandboxSettings
from pml.registry.models import CapabilityDraft
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.sandbox.base import ToolRef
from pml.sandbox.monty import MontyEngine
from pml.storage.database import Database
from proxy_overhead import alternate, percentile

SCOPE = Scope("local", "default", "e2e")
CODE = 'return {"sum": args["a"] + args["b"], "tag": %d}'
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "integer"}},
    "required": ["b"],
}


async def fill(url: str, count: int) -> float:
    """``count`` named capabilities in SCOPE; seconds it took."""
    started = time.perf_counter()
    db = await Database.open(url)
    try:
        registry = CapabilityRegistry(db)
        for index in range(count):
            draft = CapabilityDraft(
                code=CODE % index,
                name=f"bench:add_{index}",
                intent=f"add two numbers (variant {index})",
                parameters_schema=SCHEMA,
            )
            await registry.capture(SCOPE, draft, latency_ms=1.0)
    finally:
        await db.close()
    return time.perf_counter() - started


async def list_all(client: Client) -> tuple[float, int]:
    """One full ``tools/list`` (following cursors): milliseconds and tool count."""
    started = time.perf_counter()
    count, cursor = 0, None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        count += len(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return (time.perf_counter() - started) * 1000, count


async def raw_lists(config: Path, count: int) -> tuple[float, list[float], int]:
    """``tools/list`` over raw stdio JSON-RPC: the first (ms), the next ``count`` (ms), tools."""
    process = await anyio.open_process(
        [str(PML), "--config", str(config), "serve", "--stdio"], stderr=subprocess.DEVNULL
    )
    async with process:
        assert process.stdin is not None
        assert process.stdout is not None
        buffer = b""

        async def ask(message: dict[str, Any]) -> tuple[float, dict[str, Any]]:
            nonlocal buffer
            started = time.perf_counter()
            await process.stdin.send(json.dumps(message).encode() + b"\n")  # pyright: ignore[reportOptionalMemberAccess]
            if "id" not in message:
                return 0.0, {}
            while b"\n" not in buffer:
                buffer += await process.stdout.receive(1 << 20)  # pyright: ignore[reportOptionalMemberAccess]
            line, _, buffer = buffer.partition(b"\n")
            answer = json.loads(line)
            return (time.perf_counter() - started) * 1000, answer

        await ask(INITIALIZE)
        await ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
        first_ms, first = await ask({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        timings = [
            (await ask({"jsonrpc": "2.0", "id": 2 + index, "method": "tools/list"}))[0]
            for index in range(count)
        ]
        await process.stdin.aclose()  # pyright: ignore[reportOptionalMemberAccess]
        await process.wait()
    return first_ms, timings, len(first["result"]["tools"])


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


class NoTools:
    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        raise AssertionError("the benchmark's code calls no tool")


async def code_run_p50(n: int) -> float:
    async with MontyEngine() as engine:
        timings: list[float] = []
        for index in range(n + 50):
            started = time.perf_counter()
            await engine.run(
                CODE % 0, args={"a": 1, "b": 2}, caller=NoTools(), limits=SandboxSettings()
            )
            if index >= 50:
                timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


async def run(args: argparse.Namespace, quiet: TextIO) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        url = sqlite_url(workdir)
        fill_s = await fill(url, args.capabilities)
        gateway_settings = {"gateway": {"capability_tools_budget": args.budget}}
        config = write_config(
            workdir / "pml.toml",
            [],
            database_url=url,
            expose_upstream=False,
            extra=gateway_settings,
        )
        raw_cold_ms, raw_warm, listed = await raw_lists(config, 20)
        async with pml_stdio(config, workdir / "pml.log", mode=args.mode) as gateway:
            client = gateway.client
            await list_all(client)
            sdk_warm = [(await list_all(client))[0] for _ in range(20)]

            async def tool_call() -> Any:
                result = await client.call_tool("mcp__bench__add_0", {"b": 2})
                if result.is_error:
                    raise SystemExit(f"capability tool failed: {result.structured_content}")
                return result

            async def by_name() -> Any:
                result = await client.call_tool(
                    "pml_execute",
                    {"intent": "add", "capability": "bench:add_0", "args": {"b": 2}},
                )
                if result.is_error:
                    raise SystemExit(f"pml_execute failed: {result.structured_content}")
                return result

            samples = await alternate(tool_call, by_name, args.n, args.warmup)
    code_ms = await code_run_p50(args.n)
    return {
        "capabilities": args.capabilities,
        "tools_listed": listed,
        "capability_tools_budget": args.budget,
        "fill_s": round(fill_s, 1),
        "list_ms": round(statistics.median(raw_warm), 2),
        "list_cold_ms": round(raw_cold_ms, 2),
        "list_sdk_client_ms": round(statistics.median(sdk_warm), 2),
        "n": args.n,
        "tool_call_p50_ms": round(percentile(samples["direct"], 50), 3),
        "tool_call_p95_ms": round(percentile(samples["direct"], 95), 3),
        "execute_by_name_p50_ms": round(percentile(samples["via"], 50), 3),
        "code_run_p50_ms": round(code_ms, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Capability tools: listing and calling.")
    parser.add_argument("--capabilities", type=int, default=5000)
    parser.add_argument("--n", type=int, default=1000, help="timed calls per path")
    parser.add_argument("--budget", type=int, default=1_000_000, help="capability tools budget")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per path first")
    parser.add_argument("--mode", default="auto", help="auto (2026-07-28) or legacy (sessions)")
    args = parser.parse_args()
    if args.capabilities < 1 or args.n < 2:
        parser.error("--capabilities must be >= 1 and --n >= 2")
    with open(os.devnull, "w") as quiet:
        print(json.dumps(anyio.run(run, args, quiet)), flush=True)


if __name__ == "__main__":
    main()
