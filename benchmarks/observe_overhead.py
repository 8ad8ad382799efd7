"""What observing a step costs: the Prometheus metrics, the slow-call check, the access log.

    python benchmarks/observe_overhead.py [--n 50000] [--repeat 5]

Times ``observe.step`` blocks that do nothing, as core code marks them (a pass-through call
is one ``tool_call`` and one ``upstream_call`` step), with no observer, with the metrics
observer a gateway installs, with the ``[log]`` observer as ``pml serve`` installs it by
default (slow-call check only) and with ``access = true`` (one JSON line per tool call,
written to /dev/null). Times are this process's CPU time, so that other work on a shared
machine counts less. Prints one JSON line; ``*_ns`` are the median nanoseconds per step
over ``--repeat`` runs, ``added_*_ns`` what an observer adds to a step without one, and
``metrics_end_ns`` the metrics observer's own work (``StepMetrics.end``) in that:

    {"n": 50000, "none_ns": 1100, "metrics_ns": 3900, "added_metrics_ns": 2800, ...}
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from pml.sections_ops import LogSettings
from pml.telemetry import logs, observe
from pml.telemetry.metrics import StepMetrics


class KnownNames:
    """The names a small gateway knows."""

    def is_gateway_tool(self, name: str) -> bool:
        return name in {"pml_execute", "pml_discover"}

    def pass_through_target(self, name: str) -> tuple[str, str] | None:
        return ("time", "get_current_time") if name == "time__get_current_time" else None


def per_step_ns(n: int, repeat: int) -> float:
    """Median ns per step of a pass-through call's two steps (tool_call + upstream_call)."""
    runs: list[float] = []
    for _ in range(repeat):
        started = time.process_time_ns()
        for _ in range(n):
            with observe.step(
                "tool_call", tool="time__get_current_time", lane="mcp", key="pml_ab12", user="u"
            ):
                pass
            with observe.step("upstream_call", server="time", tool="get_current_time"):
                pass
        runs.append((time.process_time_ns() - started) / (2 * n))
    return statistics.median(runs)


def end_only_ns(metrics: StepMetrics, n: int, repeat: int) -> float:
    """Median ns of ``StepMetrics.end`` alone, for the same two steps."""
    tool_call = observe.Step("tool_call", {"tool": "time__get_current_time", "lane": "mcp"})
    upstream = observe.Step("upstream_call", {"server": "time", "tool": "get_current_time"})
    runs: list[float] = []
    for _ in range(repeat):
        started = time.process_time_ns()
        for _ in range(n):
            metrics.end(tool_call, None)
            metrics.end(upstream, None)
        runs.append((time.process_time_ns() - started) / (2 * n))
    return statistics.median(runs)


def measured(setup: Callable[[], None], teardown: Callable[[], None], n: int, repeat: int) -> float:
    setup()
    try:
        per_step_ns(min(n, 1000), 1)  # warm the label caches
        return per_step_ns(n, repeat)
    finally:
        teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description="What observing a step costs.")
    parser.add_argument("--n", type=int, default=50_000, help="pass-through calls per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the median is printed")
    args = parser.parse_args()
    if args.n < 1 or args.repeat < 1:
        parser.error("--n and --repeat must be at least 1")

    metrics = StepMetrics(CollectorRegistry())
    metrics.tools.add(KnownNames())
    stderr = sys.stderr
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed at the end of main
    root = logging.getLogger()
    handlers = list(root.handlers)

    def with_metrics() -> None:
        observe.add_observer(metrics)

    def without_metrics() -> None:
        observe.remove_observer(metrics)

    def with_logs(access: bool) -> Callable[[], None]:
        def setup() -> None:
            sys.stderr = devnull  # the log handlers write to sys.stderr as it is then
            logs.configure(LogSettings(access=access))
            observe.add_observer(metrics)

        return setup

    def without_logs() -> None:
        logs.reset()
        sys.stderr = stderr
        root.handlers[:] = handlers
        observe.remove_observer(metrics)

    figures: dict[str, float | int] = {"n": args.n, "repeat": args.repeat}
    figures["none_ns"] = measured(lambda: None, lambda: None, args.n, args.repeat)
    figures["metrics_ns"] = measured(with_metrics, without_metrics, args.n, args.repeat)
    figures["metrics_slow_check_ns"] = measured(with_logs(False), without_logs, args.n, args.repeat)
    figures["metrics_access_log_ns"] = measured(with_logs(True), without_logs, args.n, args.repeat)
    figures["metrics_end_ns"] = end_only_ns(metrics, args.n, args.repeat)
    devnull.close()
    none = figures["none_ns"]
    for name in ("metrics", "metrics_slow_check", "metrics_access_log"):
        figures[f"added_{name}_ns"] = figures[f"{name}_ns"] - none
    # A pass-through call is two steps: what observing adds to one call, in microseconds.
    figures["added_per_call_us_default"] = round(
        2 * figures["added_metrics_slow_check_ns"] / 1000, 3
    )
    print(
        json.dumps({key: round(v, 1) if isinstance(v, float) else v for key, v in figures.items()})
    )


if __name__ == "__main__":
    main()
