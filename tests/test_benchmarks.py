"""The quick benchmarks still run at small sizes and print the JSON their notes quote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(name: str, *arguments: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("grants", ["10", "1000"])
def test_the_policy_benchmark_times_grant_checks_with_few_or_many_grants(grants: str) -> None:
    printed = run_benchmark("policy.py", "--n", "300", "--rules", "50", "--grants", grants)
    assert printed["calls"] == 300
    assert printed["active_grants"] == max(200, int(grants))
    for key in ("per_call_p50_us", "memory_p50_us", "grant_p50_us"):
        value = printed[key]
        assert isinstance(value, float)
        assert value > 0


def test_the_curation_names_benchmark_gives_every_owner_a_name() -> None:
    printed = run_benchmark(
        "curation_names.py", "--owners", "50", "--taken", "100", "--repeat", "1"
    )
    assert (printed["owners"], printed["taken"]) == (50, 100)
    # the first gets the name itself; the taken _2.._11 are skipped: the other 49 end at _60
    assert printed["max_suffix"] == 60
    assert isinstance(printed["search_ms"], float)


def test_the_dashboard_benchmark_times_every_page_at_a_small_size() -> None:
    printed = run_benchmark(
        "dashboard.py",
        *("--capabilities", "60", "--events", "300", "--servers", "3", "--usage", "300"),
        *("--n", "2", "--embedder", "hashing"),
    )
    pages = printed["pages"]
    assert isinstance(pages, dict)
    assert {"approvals", "capabilities", "servers", "audit", "usage"} <= set(pages)
    for figures in pages.values():
        assert figures["status"] == 200
        assert figures["p95_ms"] > 0


def test_the_agent_benchmark_times_pml_s_share_of_a_turn() -> None:
    printed = run_benchmark("agent.py", "--turns", "20")
    assert printed["turns"] == 20
    offered = printed["offer_tools"]
    assert isinstance(offered, int)
    assert offered >= 1  # the time tool at least
    for key in ("overhead_p50_ms", "time_call_p50_ms", "remember_posthook_p50_ms"):
        value = printed[key]
        assert isinstance(value, float)
        assert value > 0
