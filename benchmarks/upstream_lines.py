"""Huge answers from a stdio upstream: the SDK's ``stdio_client`` against PML's transport.

    python benchmarks/upstream_lines.py [--sizes-mb 1 10 30 80] [--sdk-max-mb 30]

Starts two real stdio MCP servers (the SDK's low-level ``Server`` on ``stdio_server``, a
``blob(size)`` tool answering ``size`` bytes of text, and ``echo``). For each size and each
transport (``sdk``: ``mcp.client.stdio.stdio_client``; ``pml``:
``pml.upstream.stdio_transport.stdio_transport``, 64 MiB bound) it times one ``blob`` call
until its result arrives or is refused, and meanwhile: a small ``echo`` to the same server
sent 10 ms after the big call (its answer is queued behind the big one), ``echo`` calls to
the other server one after another (the calls of every other tenant), and the longest
and the total stalls of the event loop. Prints one JSON line:

    {"max_line_bytes": 67108864, "runs": [{"transport": "sdk", "size_mb": 30,
     "outcome": "ok", "total_ms": 5858.4, "same_server_echo_ms": 5857.0,
     "other_server_echoes": 272, "other_server_echo_p50_ms": 0.7,
     "other_server_echo_max_ms": 264.0, "loop_stall_max_ms": 136.9,
     "loop_stall_total_ms": 5006.8}, ...]}

Sizes over ``--sdk-max-mb`` run on PML's transport only (the SDK's time grows with the
square of the size: minutes at 80 MB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from pml.upstream.stdio_transport import MAX_LINE_BYTES, stdio_transport
from pml.upstream.transport import inherited_environment

SERVER = """
import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[
        types.Tool(name=name, input_schema={"type": "object"}) for name in ("blob", "echo")
    ])

async def call_tool(ctx, params):
    args = params.arguments or {}
    text = "x" * int(args["size"]) if params.name == "blob" else str(args.get("text", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

async def main():
    server = Server("lines", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""

Transport = Callable[[Path], AbstractAsyncContextManager[Any]]


def sdk(script: Path) -> AbstractAsyncContextManager[Any]:
    params = StdioServerParameters(
        command=sys.executable, args=[str(script)], env=inherited_environment()
    )
    return stdio_client(params)


def pml(script: Path) -> AbstractAsyncContextManager[Any]:
    return stdio_transport(sys.executable, [str(script)], env=inherited_environment())


TRANSPORTS: dict[str, Transport] = {"sdk": sdk, "pml": pml}


@asynccontextmanager
async def connected(transport: Transport, script: Path) -> AsyncGenerator[Client]:
    async with Client(transport(script), cache=None) as client:
        await client.call_tool("echo", {"text": "warm"})
        yield client


async def echo_ms(client: Client) -> float:
    started = time.perf_counter()
    await client.call_tool("echo", {"text": "hi"})
    return (time.perf_counter() - started) * 1000


async def one_run(name: str, script: Path, size: int) -> dict[str, Any]:
    """One big call on a fresh pair of servers, with the small calls around it."""
    figures: dict[str, Any] = {"transport": name, "size_mb": size // 1_000_000}
    transport = TRANSPORTS[name]
    async with connected(transport, script) as big, connected(transport, script) as other:
        done = anyio.Event()
        other_ms: list[float] = []
        stalls: list[float] = []

        async def call_big() -> None:
            started = time.perf_counter()
            try:
                result = await big.call_tool("blob", {"size": size})
                block = result.content[0]
                assert isinstance(block, types.TextContent)
                figures["outcome"] = "ok" if len(block.text) == size else "short"
            except MCPError as error:
                figures["outcome"] = "refused"
                figures["error"] = error.error.message[:120]
            figures["total_ms"] = round((time.perf_counter() - started) * 1000, 1)
            done.set()

        async def same_server() -> None:
            await anyio.sleep(0.01)
            figures["same_server_echo_ms"] = round(await echo_ms(big), 1)

        async def other_server() -> None:
            while not done.is_set():
                other_ms.append(await echo_ms(other))

        async def ticker() -> None:
            while not done.is_set():
                started = time.perf_counter()
                await anyio.sleep(0.005)
                stalls.append((time.perf_counter() - started - 0.005) * 1000)

        async with anyio.create_task_group() as tasks:
            for task in (call_big, same_server, other_server, ticker):
                tasks.start_soon(task)
        figures["other_server_echoes"] = len(other_ms)
        figures["other_server_echo_p50_ms"] = round(statistics.median(other_ms or [0.0]), 1)
        figures["other_server_echo_max_ms"] = round(max(other_ms, default=0.0), 1)
        figures["loop_stall_max_ms"] = round(max(stalls, default=0.0), 1)
        # the time the loop was not free to run anything else (past each 5 ms sleep)
        figures["loop_stall_total_ms"] = round(sum(stalls), 1)
    return figures


async def main(sizes_mb: list[int], sdk_max_mb: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "lines_server.py"
        script.write_text(SERVER)
        for size_mb in sizes_mb:
            for name in TRANSPORTS:
                if name == "sdk" and size_mb > sdk_max_mb:
                    continue
                runs.append(await one_run(name, script, size_mb * 1_000_000))
                print(json.dumps(runs[-1]), file=sys.stderr)
    return {"max_line_bytes": MAX_LINE_BYTES, "runs": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Huge answers from a stdio upstream.")
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 10, 30, 80])
    parser.add_argument("--sdk-max-mb", type=int, default=30)
    options = parser.parse_args()
    print(json.dumps(anyio.run(main, options.sizes_mb, options.sdk_max_mb)))
