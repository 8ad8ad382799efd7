"""The OpenTelemetry SDK side of traces: provider, OTLP/HTTP exporter, bounded shutdown.

    provider, exporter = open_provider(trace_export(settings.telemetry, environ))
    global_switch().current = provider        # the MCP SDK's spans go there too
    ...
    shut_down(provider, exporter)              # sends what is queued, SHUTDOWN_GRACE_S at most

Imported only when traces are on. A collector that cannot be reached never slows the
gateway: spans leave from the batch processor's thread, and after a failed export the next
batches are dropped for ``PAUSE_AFTER_FAILURE_S`` (one warning per outage) instead of
filling the queue and warning once per dropped span.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from typing import Final
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.util import types

from pml import __version__
from pml.telemetry.trace_settings import TraceExport

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_S: Final = 1.0  # a stdio client stops waiting for its server after ~2 s
PAUSE_AFTER_FAILURE_S: Final = 15.0
MAX_ATTRIBUTE_LENGTH: Final = 1024


def open_provider(chosen: TraceExport) -> tuple[TracerProvider, ReportingExporter]:
    """A tracer provider exporting to ``chosen.endpoint`` in batches (not yet global)."""
    otlp = OTLPSpanExporter(
        endpoint=chosen.endpoint,
        certificate_file=chosen.certificate_file,
        client_key_file=chosen.client_key_file,
        client_certificate_file=chosen.client_certificate_file,
        headers=dict(chosen.headers),
        timeout=chosen.timeout_s,
        compression=Compression(chosen.compression),
    )
    exporter = ReportingExporter(otlp, shown_endpoint(chosen.endpoint))
    provider = TracerProvider(
        sampler=_sampler(chosen),
        resource=_resource(chosen),
        span_limits=SpanLimits(max_span_attribute_length=MAX_ATTRIBUTE_LENGTH),
        shutdown_on_exit=False,  # shut down by shut_down(), bounded, never by atexit
    )
    batching = chosen.batching
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=batching.max_queue_size,
            schedule_delay_millis=batching.schedule_delay_ms,
            max_export_batch_size=batching.max_export_batch_size,
        )
    )
    return provider, exporter


def _sampler(chosen: TraceExport) -> sampling.Sampler:
    choice = chosen.sampler
    root: sampling.Sampler
    if choice.root == "on":
        root = sampling.ALWAYS_ON
    elif choice.root == "off":
        root = sampling.ALWAYS_OFF
    else:
        root = sampling.TraceIdRatioBased(choice.ratio)
    return sampling.ParentBased(root) if choice.parent_based else root


def _resource(chosen: TraceExport) -> Resource:
    attributes: dict[str, str] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": version("opentelemetry-sdk"),
        "service.version": __version__,
        **chosen.resource,
        "service.name": chosen.service_name,
    }
    return Resource(attributes)  # not Resource.create, which reads os.environ itself


def shown_endpoint(endpoint: str) -> str:
    """The collector's scheme, host and port, for logs (a path may hold a token)."""
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


def shut_down(provider: TracerProvider, exporter: ReportingExporter) -> None:
    """Send what is queued, waiting ``SHUTDOWN_GRACE_S`` at most, then give up."""
    finished = threading.Event()

    def shut_down_provider() -> None:
        try:
            provider.shutdown()
        finally:
            finished.set()

    threading.Thread(target=shut_down_provider, name="pml-traces-shutdown", daemon=True).start()
    if finished.wait(SHUTDOWN_GRACE_S):
        return
    exporter.interrupt()  # ends the exporter's retries; what is left is dropped
    if not finished.wait(SHUTDOWN_GRACE_S / 2):
        logger.warning("traces: the collector did not answer at shutdown; spans were dropped")


class ReportingExporter(SpanExporter):
    """Forwards batches to the OTLP exporter; after a failure drops them for a while."""

    def __init__(self, inner: SpanExporter, shown: str) -> None:
        self.shown = shown
        self._inner = inner
        self._paused_until = 0.0
        self._dropped = 0
        self._interrupted = False
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._interrupted or time.monotonic() < self._paused_until:
            self._dropped += len(spans)
            return SpanExportResult.FAILURE
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            if self._dropped:
                logger.warning(
                    "traces: %s accepts spans again (%d dropped meanwhile)",
                    self.shown,
                    self._dropped,
                )
                self._dropped = 0
            return result
        if not self._dropped:
            logger.warning(
                "traces: spans could not be sent to %s; dropping them for %g s at a time "
                "until it answers (the gateway keeps serving)",
                self.shown,
                PAUSE_AFTER_FAILURE_S,
            )
        self._dropped += len(spans)
        self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE_S
        return result

    def interrupt(self) -> None:
        """Stop a retry in progress; later batches are dropped."""
        self._interrupted = True
        self.shutdown()

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


# -- one global provider for the process, switched on and off ---------------------------------


class Switch(trace.TracerProvider):
    """The process's global tracer provider, delegating to ``current`` (no-op when None).

    OpenTelemetry lets a process set its global provider once, and the MCP SDK's tracer
    binds to it at first use; switching behind it lets tracing end (and start again, in
    tests) without leaving a shut-down provider in place.
    """

    def __init__(self) -> None:
        self.current: TracerProvider | None = None

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace.Tracer:
        return _SwitchedTracer(
            self, (instrumenting_module_name, instrumenting_library_version, schema_url)
        )


class _SwitchedTracer(trace.Tracer):
    """A tracer of whichever provider the switch holds now."""

    def __init__(self, switch: Switch, scope: tuple[str, str | None, str | None]) -> None:
        self._switch = switch
        self._scope = scope
        self._for: TracerProvider | None = None
        self._tracer: trace.Tracer = trace.NoOpTracer()

    def _now(self) -> trace.Tracer:
        current = self._switch.current
        if current is not self._for:
            self._for = current
            found = None if current is None else current.get_tracer(*self._scope)
            self._tracer = trace.NoOpTracer() if found is None else found
        return self._tracer

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: trace._Links = None,  # pyright: ignore[reportPrivateUsage]
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self._now().start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )

    @contextmanager
    def start_as_current_span(  # pyright: ignore[reportIncompatibleMethodOverride]
        self,
        name: str,
        context: Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: trace._Links = None,  # pyright: ignore[reportPrivateUsage]
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Generator[trace.Span]:
        with self._now().start_as_current_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
            end_on_exit,
        ) as span:
            yield span


_switch: Switch | None = None


def global_switch() -> Switch:
    """The switch, made the global tracer provider on first use."""
    global _switch
    if _switch is None:
        _switch = Switch()
        installed = trace.get_tracer_provider()
        if isinstance(installed, trace.ProxyTracerProvider):
            trace.set_tracer_provider(_switch)
        else:
            logger.warning(
                "traces: another tracer provider (%s) is installed; the MCP SDK's spans go "
                "there, PML's own to the [telemetry] collector",
                type(installed).__name__,
            )
    return _switch
