"""The gateway's memory under snippets that try to make it hold a lot (SPEC §4, issue 19).

    python benchmarks/memory_attacks.py [--only NAME ...] [--file-mb 4] [--reads 190]
                                        [--gathered 50] [--wall-time-s 180]

Starts a real ``pml serve --stdio`` (the filesystem reference server as its upstream, a
SQLite database in a temporary folder), connects the SDK client, and runs each attack as
``pml_execute`` calls. Before and after each it reads the gateway process's resident set
(``VmRSS``) and its peak (``VmHWM``) from ``/proc``; the sandbox workers are separate
processes and not counted. Prints one JSON object:

    {"baseline_rss_mb": 160.2, "attacks": [{"name": "exception_100mb", "code": "EXECUTION_FAILED",
      "error_bytes": 65536, "rss_before_mb": 160.2, "rss_after_mb": 161.0,
      "peak_growth_mb": 0.4, "seconds": 0.6}, ...], "max_peak_growth_mb": 12.3}

``peak_growth_mb`` is how far the peak rose during the attack (0 when an earlier attack
already set a higher peak: attacks run from the smallest expected cost up, and the
figure to read is ``max_peak_growth_mb``). Needs the npm servers of the e2e tests
(installed by ``scripts/e2e-deps.sh``, run here).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from e2e.support import (  # the helpers that start real servers and PML live with the e2e tests
    StdioGateway,
    install_npm_deps,
    pml_stdio,
    reference_servers,
    sqlite_url,
    write_config,
)

MB = 1024 * 1024

EXCEPTION = 'x = 1\nraise ValueError("a" * 100_000_000)'
RESULT = 'return "r" * 100_000_000'
RESULT_LIST = 'return ["r" * 1000] * 100_000'
PRINTS = 'for i in range(200):\n    print("p" * 500_000)'
ONE_PRINT = 'print("p" * 100_000_000)'
RECURSION = "def f(n):\n    return f(n + 1) + [n]\nf(0)"
KEY_ERROR = 'd = {}\nd["k" * 50_000_000]'
SYSTEM_EXIT = "raise SystemExit"
NUL_PRINT = "print(chr(0) * 990_000)"  # 1 MB printed, 6 MB as the JSON it is sent as
LONG_LINE_TRACEBACK = (  # every frame of the traceback carries the 97 KB line
    "def f(n): return f(n + 1) if n < 995 else [].pop() + len('" + "x" * 97_000 + "')\nf(0)"
)
TUPLE_KEY_ERROR = "s = 'a' * 100_000\nd = {}\nd[(s,) * 10000]"
ARGS_GATHERED = (  # each call's arguments cross to the gateway on their way to the upstream
    "import asyncio\ns = 'x' * {size}\n"
    "async def one(i):\n"
    "    return await mcp.filesystem.read_text_file(path=s + str(i))\n"
    "return len(await asyncio.gather(*[one(i) for i in range({n})]))"
)
READS = (
    "total = 0\nfor i in range({reads}):\n"
    "    text = await mcp.filesystem.read_text_file(path={path!r})\n"
    "    total += len(text)\nreturn total"
)
GATHERED = (
    "import asyncio\n"
    "texts = await asyncio.gather(*[mcp.filesystem.read_text_file(path={path!r}) "
    "for i in range({n})])\nreturn sum(len(t) for t in texts)"
)


def _status(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values


async def _execute(gateway: StdioGateway, code: str) -> dict[str, Any]:
    result = await gateway.client.call_tool("pml_execute", {"intent": "attack", "code": code})
    data = result.structured_content or {}
    return dict(data)


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    error = answer.get("error")
    if isinstance(error, dict):
        message = str(error.get("message", ""))
        return {"code": error.get("code"), "error_bytes": len(message.encode("utf-8", "replace"))}
    return {"code": answer.get("status"), "result_bytes": len(json.dumps(answer.get("result")))}


async def _measure(
    gateway: StdioGateway, name: str, attack: Callable[[], Awaitable[list[dict[str, Any]]]]
) -> dict[str, Any]:
    before = _status(gateway.pid)
    started = time.perf_counter()
    answers = await attack()
    seconds = time.perf_counter() - started
    after = _status(gateway.pid)
    return {
        "name": name,
        **_summary(answers[0]),
        "runs": len(answers),
        "rss_before_mb": round(before["VmRSS"], 1),
        "rss_after_mb": round(after["VmRSS"], 1),
        "peak_growth_mb": round(max(0.0, after["VmHWM"] - before["VmHWM"]), 1),
        "peak_mb": round(after["VmHWM"], 1),
        "seconds": round(seconds, 2),
    }


async def _concurrently(gateway: StdioGateway, code: str, n: int) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []

    async def one() -> None:
        answers.append(await _execute(gateway, code))

    async with anyio.create_task_group() as group:
        for _ in range(n):
            group.start_soon(one)
    return answers


async def run(args: argparse.Namespace) -> dict[str, Any]:
    deps = install_npm_deps()
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        workdir = Path(tmp)
        servers = reference_servers(deps, workdir)
        big = workdir / "files" / "big.txt"
        big.write_text(("0123456789abcdef" * 64 + "\n") * (args.file_mb * MB // 1025))
        config = write_config(
            workdir / "pml.toml",
            [servers["filesystem"]],
            database_url=sqlite_url(workdir),
            expose_upstream=False,
            extra={
                "permissions": {"allow": ["*:*"]},
                "sandbox": {"wall_time_s": args.wall_time_s},
            },
        )
        reads = READS.format(reads=args.reads, path=str(big))
        big_args = ARGS_GATHERED.format(size=30 * MB, n=20)
        many_args = ARGS_GATHERED.format(size=4 * MB, n=50)
        gathered = GATHERED.format(n=args.gathered, path=str(big))
        attacks: dict[str, Callable[[StdioGateway], Awaitable[list[dict[str, Any]]]]] = {
            "system_exit": lambda g: _concurrently(g, SYSTEM_EXIT, 1),
            "deep_recursion": lambda g: _concurrently(g, RECURSION, 1),
            "print_flood_100mb": lambda g: _concurrently(g, PRINTS, 1),
            "one_print_100mb": lambda g: _concurrently(g, ONE_PRINT, 1),
            "exception_100mb": lambda g: _concurrently(g, EXCEPTION, 1),
            "exception_100mb_x4": lambda g: _concurrently(g, EXCEPTION, 4),
            "result_100mb": lambda g: _concurrently(g, RESULT, 1),
            "result_100mb_list": lambda g: _concurrently(g, RESULT_LIST, 1),
            f"tool_results_{args.reads}x{args.file_mb}mb": lambda g: _concurrently(g, reads, 1),
            f"tool_results_gathered_{args.gathered}x{args.file_mb}mb": lambda g: _concurrently(
                g, gathered, 1
            ),
            "nul_print_1mb_x4": lambda g: _concurrently(g, NUL_PRINT, 4),
            "traceback_97kb_line_x995_frames": lambda g: _concurrently(g, LONG_LINE_TRACEBACK, 1),
            "tool_args_30mb_gathered_x20": lambda g: _concurrently(g, big_args, 1),
            "tool_args_4mb_gathered_x50": lambda g: _concurrently(g, many_args, 1),
            "key_error_tuple_key": lambda g: _concurrently(g, TUPLE_KEY_ERROR, 1),
            "key_error_50mb_builtin": lambda g: _concurrently(g, KEY_ERROR, 1),
            "key_error_50mb_builtin_x4": lambda g: _concurrently(g, KEY_ERROR, 4),
        }
        chosen = [name for name in attacks if not args.only or name in args.only]
        async with pml_stdio(config, workdir / "pml.log") as gateway:
            await _execute(gateway, "return 40 + 2")  # warm: sandbox, database, upstream
            warm = await _execute(gateway, reads.replace(f"range({args.reads})", "range(1)"))
            if warm.get("status") != "success":
                raise SystemExit(f"the filesystem read does not work: {warm}")
            baseline = _status(gateway.pid)
            results = []
            for name in chosen:
                attack = attacks[name]
                results.append(await _measure(gateway, name, lambda a=attack: a(gateway)))
            alive = await _execute(gateway, "return 40 + 2")
            final = _status(gateway.pid)
    return {
        "baseline_rss_mb": round(baseline["VmRSS"], 1),
        "baseline_peak_mb": round(baseline["VmHWM"], 1),
        "attacks": results,
        "final_rss_mb": round(final["VmRSS"], 1),
        "final_peak_mb": round(final["VmHWM"], 1),
        "max_peak_growth_mb": round(final["VmHWM"] - baseline["VmHWM"], 1),
        "still_serving": alive.get("result") == 42,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--file-mb", type=int, default=4)
    parser.add_argument("--reads", type=int, default=190)
    parser.add_argument("--gathered", type=int, default=50)
    # 190 reads of 4 MB through a stdio upstream take ~30 s on 2 loaded cores.
    parser.add_argument("--wall-time-s", type=float, default=180.0)
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args), indent=1))


if __name__ == "__main__":
    main()
