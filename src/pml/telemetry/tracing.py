"""OpenTelemetry traces of a serving process (off by default).

    with exporting(settings.telemetry, os.environ):      # the entry point's environment
        await serve_http(settings, host, port)

When ``[telemetry] traces = true`` or the standard ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT``
variable asks for traces (``trace_settings``), the block runs with an SDK tracer provider
exporting over OTLP/HTTP in batches (``otlp``), every observed step becoming a span and
every database statement inside a request too (``spans``). On exit the spans still queued
are sent, waiting a bounded time. When traces are off nothing is installed and nothing of
OpenTelemetry's SDK is even imported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from typing import Final

from pml.sections_ops import TelemetrySettings
from pml.telemetry.trace_settings import TraceExport, trace_export

logger = logging.getLogger(__name__)

TRACER_NAME: Final = "pml"

_exporting_now: TraceExport | None = None
_finish: Callable[[], None] | None = None


def active() -> bool:
    """Whether spans are being exported now (entry points install propagation only then)."""
    return _exporting_now is not None


@contextmanager
def exporting(settings: TelemetrySettings, environ: Mapping[str, str]) -> Generator[None]:
    """Export spans while the block runs when ``settings`` or ``OTEL_*`` ask for it."""
    global _exporting_now
    chosen = trace_export(settings, environ)
    if chosen is None:
        yield
        return
    if _exporting_now is not None:
        raise RuntimeError("traces are already being exported by this process")
    from pml.telemetry import observe, otlp
    from pml.telemetry.spans import StepSpans, database_spans

    provider, exporter = otlp.open_provider(chosen)
    switch = otlp.global_switch()
    switch.current = provider
    tracer = provider.get_tracer(TRACER_NAME)
    steps = StepSpans(tracer)
    observe.add_observer(steps)
    _exporting_now = chosen
    logger.info("traces: exporting to %s as %s", exporter.shown, chosen.service_name)

    def close() -> None:
        observe.remove_observer(steps)
        switch.current = None
        otlp.shut_down(provider, exporter)

    global _finish
    _finish = close
    try:
        with database_spans(tracer):
            yield
    finally:
        _exporting_now = None
        finish()


def finish() -> None:
    """Stop exporting and send the spans still queued (bounded); idempotent. A process
    about to end by a signal calls it, since the ``exporting`` block never ends then."""
    global _finish
    close, _finish = _finish, None
    if close is not None:
        close()
