"""Telemetry of a serving process, set up by its entry point (``pml serve``).

    with telemetry_running(settings, os.environ):
        await serve_http(settings, host, port)

Logging takes its format and levels from ``[log]``; traces are exported while the block
runs when ``[telemetry]`` or the standard ``OTEL_*`` variables ask for them (flushed at exit).
Metrics need no set-up: every gateway counts its steps (``telemetry.metrics``).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import contextmanager

from pml.config import Settings


@contextmanager
def telemetry_running(settings: Settings, environ: Mapping[str, str]) -> Generator[None]:
    """Configure logging and, when asked for, export traces until the block ends."""
    from pml.telemetry import logs, tracing

    logs.configure(settings.log)
    with tracing.exporting(settings.telemetry, environ):
        yield
