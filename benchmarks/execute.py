"""What ``pml_execute`` adds to one real upstream tool call, end to end over stdio.

    python benchmarks/execute.py [--n 500] [--warmup 30] [--mode auto|legacy]

Calls server-everything's ``echo`` N times directly with the SDK client, and N times as a
``pml_execute`` snippet making that one call through ``pml serve --stdio`` (the same code
each time: analysis, sandbox run, capture as a use of the existing capability, trace), the
two alternating one by one in the same run. Prints one JSON line:

    {"n": 500, "direct_p50_ms": 0.6, "execute_p50_ms": 3.1, "added_p50_ms": 2.5,
     "added_p95_ms": 3.4}

Needs the npm servers of the e2e tests (installed by ``scripts/e2e-deps.sh``, run here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real servers and PML live with the e2e tests
    install_npm_deps,
    pml_stdio,
    reference_servers,
    sqlite_url,
    write_config,
)
from proxy_overhead import alternate, percentile

SNIPPET = 'said = await mcp.everything.echo(message="ping")\nreturn said'


async def run(args: argparse.Namespace, quiet: TextIO) -> None:
    deps = install_npm_deps()
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        upstream = reference_servers(deps, workdir)["everything"]
        config = write_config(
            workdir / "pml.toml",
            [upstream],
            database_url=sqlite_url(workdir),
            expose_upstream=False,
        )
        async with (
            Client(stdio_client(upstream.params(), errlog=quiet)) as direct_client,
            pml_stdio(config, workdir / "pml.log", mode=args.mode) as gateway,
        ):

            async def direct() -> Any:
                return await direct_client.call_tool("echo", {"message": "ping"})

            async def execute() -> Any:
                result = await gateway.client.call_tool(
                    "pml_execute", {"intent": "echo ping", "code": SNIPPET}
                )
                if result.is_error:
                    raise SystemExit(f"pml_execute failed: {result.structured_content}")
                return result

            samples = await alternate(direct, execute, args.n, args.warmup)
    direct_ms, via_ms = samples["direct"], samples["via"]
    print(
        json.dumps(
            {
                "n": len(direct_ms),
                "direct_p50_ms": round(percentile(direct_ms, 50), 3),
                "execute_p50_ms": round(percentile(via_ms, 50), 3),
                "added_p50_ms": round(percentile(via_ms, 50) - percentile(direct_ms, 50), 3),
                "added_p95_ms": round(percentile(via_ms, 95) - percentile(direct_ms, 95), 3),
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="What pml_execute adds to one tool call.")
    parser.add_argument("--n", type=int, default=500, help="timed calls per path")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls per path first")
    parser.add_argument("--mode", default="auto", help="auto (2026-07-28) or legacy (sessions)")
    args = parser.parse_args()
    if args.n < 2:
        parser.error("--n must be >= 2")
    with open(os.devnull, "w") as quiet:
        anyio.run(run, args, quiet)


if __name__ == "__main__":
    main()
