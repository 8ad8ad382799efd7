"""What OpenTelemetry traces cost per step and per tool call, off (the default) and on.

    python benchmarks/tracing_overhead.py [--n 2000] [--rounds 3]

Times, in one process:

- one empty ``observe.step`` (the marks core code leaves on every request's path), with no
  observer (traces off) and with the span observer exporting over OTLP (on);
- one ``tools/call`` of a pass-through tool (``a__echo``) and one ``pml_execute`` snippet
  making one upstream call, through an in-process gateway and SDK client: the full path
  (SDK server span, steps, database statements, the upstream's client span).

Off and on alternate in blocks of N for ``--rounds`` rounds; each figure is the median over
its blocks of the per-block mean, in wall time (``_us``) and in this process's CPU time
(``_cpu_us``: all its threads, the exporter's included; steadier on a shared machine).
An "on" block includes turning traces on and sending its spans at its end, to a collector
stand-in in another process (it answers 200 and discards): the figures include encoding
and sending the spans from the exporter's thread. The spans per call are counted by a
decoding receiver afterwards (the in-process upstream's own server span among them).
Prints one JSON line:

    {"n": 2000, "rounds": 3, "step_off_us": 2.1, "step_on_us": 60.3, "call_off_us": 2200.0,
     "call_on_us": 2900.0, "call_added_us": 700.0, "call_added_cpu_us": 650.0, ...,
     "spans_per_call": 5.0, "spans_per_execute": 9.0}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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
# A queue that holds a whole block: spans are exported, never dropped for a full queue
# (what a step costs is then the span plus its share of encoding and sending).
QUEUE_ALL = {"OTEL_BSP_MAX_QUEUE_SIZE": "1000000"}
SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def collector_elsewhere() -> Iterator[str]:
    """A process answering OTLP/HTTP exports with 200; yields its endpoint."""
    process = subprocess.Popen(
        [sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{int(process.stdout.readline())}"
    finally:
        process.kill()
        process.wait(timeout=10)


Timing = tuple[float, float]  # mean wall and process CPU microseconds per call


@contextmanager
def traced_if(settings: TelemetrySettings | None) -> Iterator[None]:
    """Traces exported to ``settings`` while the block runs (None: off, the default)."""
    if settings is None:
        yield
        return
    with tracing.exporting(settings, QUEUE_ALL):
        yield


def step_block(n: int, settings: TelemetrySettings | None) -> Timing:
    """One empty step, ``n`` times; the time includes sending the spans at the end."""
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    with traced_if(settings):
        for _ in range(n):
            with observe.step("upstream_call", server="s", tool="t"):
                pass
    return (time.perf_counter_ns() - wall) / n / 1000, (time.process_time_ns() - cpu) / n / 1000


async def call_block(
    call: Callable[[], Awaitable[Any]], n: int, settings: TelemetrySettings | None = None
) -> Timing:
    """``call``, ``n`` times; the time includes sending the spans at the end."""
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    with traced_if(settings):
        for _ in range(n):
            result = await call()
            if getattr(result, "is_error", False):
                raise SystemExit(f"the benchmarked call failed: {result!r}")
    return (time.perf_counter_ns() - wall) / n / 1000, (time.process_time_ns() - cpu) / n / 1000


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}

    def note(name: str, timing: Timing) -> None:
        figures.setdefault(f"{name}_us", []).append(timing[0])
        figures.setdefault(f"{name}_cpu_us", []).append(timing[1])

    with (
        tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp,
        otlp_receiver() as receiver,
        collector_elsewhere() as sink,
    ):
        settings = gateway_settings(f"sqlite:///{Path(tmp) / 'pml.db'}", expose_upstream=True)
        pool = ClientPool({"a": Upstream("a").server})
        traced = TelemetrySettings(traces=True, otlp_endpoint=sink)
        async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:

            async def passthrough() -> Any:
                return await client.call_tool("a__echo", {"text": "ping"})

            async def execute() -> Any:
                return await client.call_tool(
                    "pml_execute", {"intent": "echo ping", "code": SNIPPET}
                )

            for call in (passthrough, execute):  # warm up: first run, capability capture
                await call_block(call, 20)
            runs = max(1, args.n // 4)
            for _ in range(args.rounds):
                for state, chosen in (("off", None), ("on", traced)):
                    note(f"step_{state}", step_block(args.n * 10, chosen))
                    note(f"call_{state}", await call_block(passthrough, args.n, chosen))
                    note(f"execute_{state}", await call_block(execute, runs, chosen))
            counted = TelemetrySettings(traces=True, otlp_endpoint=receiver.endpoint)
            for name, call in (("spans_per_call", passthrough), ("spans_per_execute", execute)):
                before = len(receiver.snapshot())  # every earlier span was sent at its exit
                await call_block(call, 10, counted)
                figures[name] = [(len(receiver.snapshot()) - before) / 10]
    result: dict[str, Any] = {"n": args.n, "rounds": args.rounds}
    for name in sorted(figures):
        result[name] = round(statistics.median(figures[name]), 2)
    for name in ("step", "call", "execute"):
        for unit in ("us", "cpu_us"):
            added = result[f"{name}_on_{unit}"] - result[f"{name}_off_{unit}"]
            result[f"{name}_added_{unit}"] = round(added, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls per block")
    parser.add_argument("--rounds", type=int, default=3, help="off/on rounds")
    args = parser.parse_args()
    print(json.dumps(anyio.run(run, args)))


if __name__ == "__main__":
    main()
