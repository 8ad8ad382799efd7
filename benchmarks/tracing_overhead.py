"""What OpenTelemetry traces cost per step and per tool call, off (the default) and on.

    python benchmarks/tracing_overhead.py [--n 2000] [--rounds 3]

Times, in one process:

- one empty ``observe.step`` (the marks core code leaves on every request's path), with no
  observer (traces off) and with the span observer exporting to a local OTLP receiver;
- one ``tools/call`` of a pass-through tool (``a__echo``) and one ``pml_execute`` snippet
  making one upstream call, through an in-process gateway and SDK client: the full path
  (SDK server span, steps, database statements, the upstream's client span).

Off and on alternate in blocks of N for ``--rounds`` rounds; each figure is the median over
its blocks of the per-block mean. Prints one JSON line:

    {"n": 2000, "step_off_us": 0.4, "step_on_us": 9.8, "call_off_us": 900.0,
     "call_on_us": 1100.0, "call_added_us": 200.0, "execute_off_us": ..., "spans_per_call": 4}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# The in-process upstream and the OTLP receiver live with the tests.
from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.server import open_gateway
from pml.sections_ops import TelemetrySettings
from pml.telemetry import observe, tracing
from pml.upstream.pool import ClientPool
from telemetry.otlp_receiver import otlp_receiver

SNIPPET = 'said = await mcp.a.echo(text="ping")\nreturn said'


def step_block(n: int) -> float:
    """Mean microseconds of one empty step."""
    started = time.perf_counter_ns()
    for _ in range(n):
        with observe.step("upstream_call", server="s", tool="t"):
            pass
    return (time.perf_counter_ns() - started) / n / 1000


async def call_block(call: Callable[[], Awaitable[Any]], n: int) -> float:
    """Mean microseconds of one awaited call."""
    started = time.perf_counter_ns()
    for _ in range(n):
        result = await call()
        if getattr(result, "is_error", False):
            raise SystemExit(f"the benchmarked call failed: {result!r}")
    return (time.perf_counter_ns() - started) / n / 1000


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp, otlp_receiver() as receiver:
        settings = gateway_settings(f"sqlite:///{Path(tmp) / 'pml.db'}", expose_upstream=True)
        pool = ClientPool({"a": Upstream("a").server})
        traced = TelemetrySettings(traces=True, otlp_endpoint=receiver.endpoint)
        async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:

            async def passthrough() -> Any:
                return await client.call_tool("a__echo", {"text": "ping"})

            async def execute() -> Any:
                return await client.call_tool(
                    "pml_execute", {"intent": "echo ping", "code": SNIPPET}
                )

            for call in (passthrough, execute):  # warm up: first run, capability capture
                await call_block(call, 20)
            for _ in range(args.rounds):
                note("step_off_us", step_block(args.n * 10))
                note("call_off_us", await call_block(passthrough, args.n))
                note("execute_off_us", await call_block(execute, max(1, args.n // 4)))
                with tracing.exporting(traced, {}):
                    note("step_on_us", step_block(args.n * 10))
                    note("call_on_us", await call_block(passthrough, args.n))
                    note("execute_on_us", await call_block(execute, max(1, args.n // 4)))
            for name, call in (("spans_per_call", passthrough), ("spans_per_execute", execute)):
                before = len(receiver.snapshot())  # every earlier span was flushed at exit
                with tracing.exporting(traced, {}):
                    await call_block(call, 10)
                note(name, (len(receiver.snapshot()) - before) / 10)
    result: dict[str, Any] = {"n": args.n, "rounds": args.rounds}
    for name in sorted(figures):
        result[name] = round(statistics.median(figures[name]), 2)
    result["call_added_us"] = round(result["call_on_us"] - result["call_off_us"], 2)
    result["execute_added_us"] = round(result["execute_on_us"] - result["execute_off_us"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls per block")
    parser.add_argument("--rounds", type=int, default=3, help="off/on rounds")
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args)))


if __name__ == "__main__":
    main()
