"""The quick benchmarks still run at small sizes and print the JSON their notes quote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

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


def part(printed: dict[str, object], key: str) -> dict[str, Any]:
    """A nested object of a benchmark's JSON."""
    value = printed[key]
    assert isinstance(value, dict), (key, value)
    return cast(dict[str, Any], value)


def test_the_discovery_benchmark_reports_each_held_out_set_per_kind() -> None:
    printed = run_benchmark("discovery.py", "--items", "120", "--holdout", "--embedder", "hashing")
    assert printed["n_items"] == 120
    sets = part(printed, "sets")
    assert set(sets) == {"discovery_holdout", "discovery_holdout_v2"}
    held_out = sets["discovery_holdout_v2"]
    assert held_out["n_queries"] == 203
    kinds = held_out["per_kind"]
    assert (kinds["tool"]["n_queries"], kinds["capability"]["n_queries"]) == (103, 100)
    for figures in [*kinds.values(), *part(printed, "per_kind").values()]:
        assert 0 <= figures["recall_at_1"] <= figures["recall_at_5"] <= 1
        assert figures["p95_ms"] > 0
    # the hashing fallback still finds a synthetic target among 120 items by its system name
    assert kinds["capability"]["recall_at_5"] >= 0.5


def _needs_npm_servers() -> None:
    """The paraphrase and reuse benchmarks run the npm reference servers (e2e rules apply)."""
    from e2e.support import E2eSetupError, install_npm_deps

    try:
        install_npm_deps()
    except E2eSetupError as error:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"e2e npm dependencies unavailable: {error}")
        pytest.skip(f"e2e npm dependencies unavailable: {error}")


@pytest.mark.e2e
def test_the_paraphrase_benchmark_finds_learned_capabilities_through_a_real_gateway() -> None:
    _needs_npm_servers()
    printed = run_benchmark("paraphrase.py", "--tasks", "4")
    assert (printed["capabilities"], printed["queries"], printed["reuse"]) == (4, 12, True)
    for kind in ("capability", "all"):
        figures = part(printed, kind)
        assert 0 <= figures["top1"] <= figures["top3"] <= 1
        assert figures["p95_ms"] > 0
    # four log-reading capabilities: most paraphrases still find theirs in the top three
    assert part(printed, "capability")["top3"] >= 0.75


@pytest.mark.e2e
def test_the_reuse_benchmark_counts_fewer_tokens_for_a_capability_called_by_name() -> None:
    _needs_npm_servers()
    printed = run_benchmark("reuse.py", "--distinct", "2", "--repeats", "2")
    assert (printed["tasks"], printed["runs"]) == (2, 4)
    ways = {way: part(printed, way) for way in ("pml_tool", "pml_discover", "resend", "direct")}
    for figures in ways.values():
        assert figures["session_tokens"] > 0
        assert figures["repeat_tokens"] > 0
    # calling the learned tool by name costs less than sending its code again
    assert ways["pml_tool"]["repeat_tokens"] < ways["resend"]["repeat_tokens"]
    assert 0 < part(printed, "repeat_savings_vs_resend")["pml_tool"] < 1
    # the model reads one copy of each result, and the overhead leaves out each run's answer
    answers = part(printed, "answer_tokens")
    assert answers["first"] > 0
    assert answers["repeat"] > 0
    for figures in ways.values():
        reads, overhead = figures["model_reads"], figures["overhead"]
        assert reads["session_tokens"] == overhead["session_tokens"] == figures["session_tokens"]
        assert 0 < reads["repeat_tokens"] < figures["repeat_tokens"]
        assert 0 <= overhead["repeat_tokens"] < reads["repeat_tokens"]
        assert reads["repeat_tokens"] - overhead["repeat_tokens"] <= answers["repeat"]
    by_accounting = part(printed, "repeat_savings_vs_resend_by_accounting")
    assert set(by_accounting) == {"wire", "model_reads", "overhead"}
    assert by_accounting["wire"] == part(printed, "repeat_savings_vs_resend")
    for accounting in ("model_reads", "overhead"):
        assert 0 < by_accounting[accounting]["pml_tool"] < 1
    for total in ("total_savings_vs_resend", "total_savings_vs_direct"):
        assert part(printed, f"{total}_by_accounting")["wire"] == part(printed, total)
