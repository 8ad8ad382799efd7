"""How long short ``pml`` commands take, from spawn to exit, as a user runs them.

    python benchmarks/cli_startup.py [--runs 15]

Each command runs as a new process (``.venv/bin/pml``) in a fresh directory with its own
``pml.toml`` and SQLite database (migrated first, so that ``pml status`` reads a real one),
no gateway running. Prints one JSON line:

    {"runs": 15, "commands": {"pml --help": {"p50_ms": 180.0, "min_ms": ..., "max_ms": ...,
     "cpu_p50_ms": 170.0}, ...}, "python_p50_ms": 15.0, "goal_ms": 300, ...}

``python_p50_ms`` is a bare ``python -c pass``: the floor no command can go under. Goal
(issue "complete gateway"): ``pml --help`` and the other short verbs under 300 ms. To see
where the time goes: ``python -X importtime -c "import pml.cli.app"``.
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

ROOT = Path(__file__).resolve().parents[1]
PML = Path(os.environ.get("PML_BENCH_PML") or ROOT / ".venv" / "bin" / "pml")
GOAL_MS = 300
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("--version",),
    ("status", "--help"),
    ("status", "--json"),
    ("status",),
    ("reload",),
    ("keys", "list", "--json"),
    ("cap", "list", "--json"),
)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Milliseconds from spawn to exit, and the CPU time (user + system) the process used:
    on a busy machine the wall time waits for a core, the CPU time does not. The exit code
    does not matter (`pml reload` with no gateway running exits 1 by design)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _pid, _status, usage = os.wait4(process.pid, 0)
    process.returncode = 0  # reaped above
    wall = (time.perf_counter() - started) * 1000
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def figures(samples: list[tuple[float, float]]) -> dict[str, float]:
    wall = [sample[0] for sample in samples]
    cpu = [sample[1] for sample in samples]
    return {
        "p50_ms": round(statistics.median(wall), 1),
        "min_ms": round(min(wall), 1),
        "max_ms": round(max(wall), 1),
        "cpu_p50_ms": round(statistics.median(cpu), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Time short pml commands.")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    runs = max(1, min(args.runs, 1000))
    with tempfile.TemporaryDirectory(prefix="pml-cli-bench-") as tmp:
        workdir = Path(tmp)
        database = workdir / "pml.db"
        (workdir / "pml.toml").write_text(
            f'database_url = "sqlite:///{database}"\n\n'
            '[servers.time]\ncommand = "uvx"\nargs = ["mcp-server-time"]\n',
            encoding="utf-8",
        )
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("PML_") and key != "VIRTUAL_ENV"
        }
        env["PML_CONFIG"] = str(workdir / "pml.toml")
        subprocess.run([str(PML), "db", "upgrade"], env=env, cwd=workdir, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        python = [timed([sys.executable, "-c", "pass"], env, workdir)[0] for _ in range(runs)]
        found: dict[str, dict[str, float]] = {}
        for command in COMMANDS:
            argv = [str(PML), *command]
            timed(argv, env, workdir)  # warm the page cache and the bytecode
            found[" ".join(["pml", *command])] = figures(
                [timed(argv, env, workdir) for _ in range(runs)]
            )
    print(
        json.dumps(
            {
                "runs": runs,
                "commands": found,
                "python_p50_ms": round(statistics.median(python), 1),
                "goal_ms": GOAL_MS,
                "load_average_1m": round(os.getloadavg()[0], 2),
                "over_goal": sorted(name for name, f in found.items() if f["p50_ms"] > GOAL_MS),
            }
        )
    )


if __name__ == "__main__":
    main()
