"""Latency of the sandbox engine alone (``MontyEngine``), without the gateway around it.

    python benchmarks/sandbox.py --n 1000

Cases: "empty" runs ``return None``; "ten_calls" makes 10 sequential
``await mcp.echo.echo(i=i)`` calls to an in-process echo ``ToolCaller``. Each case is
warmed up, then run N times one after the other; prints one JSON line per case:
{"case", "n", "p50_ms", "p95_ms"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from pml.config import SandboxSettings
from pml.sandbox.base import ToolRef
from pml.sandbox.monty import MontyEngine

CASES = {
    "empty": "return None",
    "ten_calls": "for i in range(10):\n    await mcp.echo.echo(i=i)\nreturn i",
}


class EchoCaller:
    """Answers every call with its arguments."""

    async def call_tool(self, ref: ToolRef, arguments: dict[str, Any]) -> Any:
        return arguments


async def measure(engine: MontyEngine, code: str, n: int, warmup: int) -> dict[str, float]:
    """Run ``code`` ``warmup`` then ``n`` times; milliseconds per run."""
    caller = EchoCaller()
    limits = SandboxSettings()
    for _ in range(warmup):
        await engine.run(code, args={}, caller=caller, limits=limits)
    timings: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        await engine.run(code, args={}, caller=caller, limits=limits)
        timings.append((time.perf_counter() - started) * 1000)
    quantiles = statistics.quantiles(timings, n=100, method="inclusive")
    return {"p50_ms": round(quantiles[49], 4), "p95_ms": round(quantiles[94], 4)}


async def run(n: int, warmup: int, cases: list[str]) -> list[dict[str, Any]]:
    """Every case on one engine; the JSON results."""
    results: list[dict[str, Any]] = []
    async with MontyEngine() as engine:
        for case in cases:
            figures = await measure(engine, CASES[case], n, warmup)
            results.append({"case": case, "n": n, **figures})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description="Latency of the sandbox engine alone.")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--case", choices=sorted(CASES), action="append", dest="cases")
    args = parser.parse_args()
    for result in asyncio.run(run(args.n, args.warmup, args.cases or list(CASES))):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
