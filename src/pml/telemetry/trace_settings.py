"""Whether and where a serving process exports traces: ``[telemetry]`` plus ``OTEL_*``.

    chosen = trace_export(settings.telemetry, os.environ)   # None: traces are off
    if chosen is not None:
        print(chosen.endpoint, chosen.service_name, chosen.sampler)

``[telemetry]`` wins over the standard variables wherever it says something; the variables
fill in the rest (the OpenTelemetry SDK's own names and meanings, durations in
milliseconds as the specification has them). ``OTEL_SDK_DISABLED=true`` turns traces off
whatever else says. A malformed variable is ignored with a warning (the specification's
rule); a malformed ``[telemetry]`` never gets here (the settings refuse it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import unquote

from pydantic import ValidationError

from pml.sections_ops import TelemetrySettings

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT: Final = "http://localhost:4318"
TRACES_PATH: Final = "/v1/traces"
MAX_ENTRIES: Final = 64  # resource attributes or headers taken from one variable
MAX_TIMEOUT_MS: Final = 60_000

Compression = Literal["none", "gzip", "deflate"]
RootSampler = Literal["on", "off", "ratio"]


@dataclass(frozen=True, slots=True)
class SamplerChoice:
    """Which traces are kept: ``root`` decides new traces, ``parent_based`` follows a
    caller's sampled flag (``traceparent``) when there is one."""

    root: RootSampler = "on"
    ratio: float = 1.0
    parent_based: bool = True


@dataclass(frozen=True, slots=True)
class Batching:
    """The batch span processor's knobs (``OTEL_BSP_*``)."""

    schedule_delay_ms: int = 5000
    max_queue_size: int = 2048
    max_export_batch_size: int = 512


@dataclass(frozen=True, slots=True)
class TraceExport:
    """Everything needed to export spans over OTLP/HTTP (see ``trace_export``)."""

    endpoint: str
    service_name: str = "pml"
    resource: Mapping[str, str] = field(default_factory=dict[str, str])
    sampler: SamplerChoice = SamplerChoice()
    headers: Mapping[str, str] = field(default_factory=dict[str, str], repr=False)
    timeout_s: float = 10.0
    compression: Compression = "none"
    certificate_file: str | None = None
    client_key_file: str | None = None
    client_certificate_file: str | None = None
    batching: Batching = Batching()


def trace_export(settings: TelemetrySettings, environ: Mapping[str, str]) -> TraceExport | None:
    """How to export traces, or ``None`` when they are off (the default)."""
    env = _Variables(environ)
    from_env = env.endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", full=True) or env.endpoint(
        "OTEL_EXPORTER_OTLP_ENDPOINT", full=False
    )
    if not (settings.traces or from_env):
        return None
    if env.flag("OTEL_SDK_DISABLED"):
        logger.info("traces are off: OTEL_SDK_DISABLED is true")
        return None
    exporter = env.text("OTEL_TRACES_EXPORTER").lower()
    if exporter == "none":
        logger.info("traces are off: OTEL_TRACES_EXPORTER is none")
        return None
    if exporter not in ("", "otlp"):
        logger.warning("OTEL_TRACES_EXPORTER=%r is not supported; using otlp", exporter[:100])
    protocol = env.text("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.text(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if protocol not in ("", "http/protobuf"):
        logger.warning("OTLP protocol %r is not supported; using http/protobuf", protocol[:100])
    if settings.otlp_endpoint is not None:
        endpoint = traces_url(settings.otlp_endpoint)
    else:
        endpoint = from_env or traces_url(DEFAULT_ENDPOINT)
    return TraceExport(
        endpoint=endpoint,
        service_name=_service_name(settings, env),
        resource=env.pairs("OTEL_RESOURCE_ATTRIBUTES"),
        sampler=_sampler(settings, env),
        headers=env.pairs("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
        timeout_s=env.millis(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", default=10_000
        )
        / 1000,
        compression=env.compression(),
        certificate_file=env.path("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
        or env.path("OTEL_EXPORTER_OTLP_CERTIFICATE"),
        client_key_file=env.path("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY")
        or env.path("OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        client_certificate_file=env.path("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE")
        or env.path("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        batching=_batching(env),
    )


def traces_url(base: str) -> str:
    """The collector's traces URL: ``base`` itself when it already ends in ``/v1/traces``."""
    trimmed = base.rstrip("/")
    return trimmed if trimmed.endswith(TRACES_PATH) else trimmed + TRACES_PATH


def _service_name(settings: TelemetrySettings, env: _Variables) -> str:
    if "service_name" in settings.model_fields_set:
        return settings.service_name
    named = env.text("OTEL_SERVICE_NAME") or env.pairs("OTEL_RESOURCE_ATTRIBUTES").get(
        "service.name", ""
    )
    if named and len(named) <= 200 and named.isprintable():
        return named
    if named:
        logger.warning("the service name from the environment is not valid; using pml")
    return settings.service_name


def _sampler(settings: TelemetrySettings, env: _Variables) -> SamplerChoice:
    if "sample_ratio" in settings.model_fields_set:
        return SamplerChoice("ratio", settings.sample_ratio)
    name = env.text("OTEL_TRACES_SAMPLER").lower() or "parentbased_always_on"
    parent_based = name.startswith("parentbased_")
    root = name.removeprefix("parentbased_")
    if root == "always_on":
        return SamplerChoice("on", 1.0, parent_based)
    if root == "always_off":
        return SamplerChoice("off", 0.0, parent_based)
    if root == "traceidratio":
        return SamplerChoice("ratio", env.ratio("OTEL_TRACES_SAMPLER_ARG"), parent_based)
    logger.warning("OTEL_TRACES_SAMPLER=%r is not supported; keeping every trace", name[:100])
    return SamplerChoice()


def _batching(env: _Variables) -> Batching:
    default = Batching()
    queue = env.count("OTEL_BSP_MAX_QUEUE_SIZE", default.max_queue_size)
    batch = env.count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", default.max_export_batch_size)
    if batch > queue:
        logger.warning("OTEL_BSP_MAX_EXPORT_BATCH_SIZE exceeds the queue size; using the queue's")
        batch = queue
    delay = env.millis("OTEL_BSP_SCHEDULE_DELAY", default=default.schedule_delay_ms)
    return Batching(delay, queue, batch)


_KEY = re.compile(r"^[\x21-\x7e]{1,256}$")  # printable ASCII, no spaces: a header or attribute
_DIGITS = re.compile(r"^[0-9]{1,9}$")


class _Variables:
    """Typed reads of ``OTEL_*`` variables; a malformed one is warned about and ignored."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def text(self, name: str) -> str:
        return self._environ.get(name, "").strip()

    def flag(self, name: str) -> bool:
        value = self.text(name).lower()
        if value not in ("", "true", "false"):
            logger.warning("%s must be true or false; ignored", name)
        return value == "true"

    def endpoint(self, name: str, *, full: bool) -> str | None:
        value = self.text(name)
        if not value:
            return None
        try:
            TelemetrySettings(otlp_endpoint=value)
        except ValidationError as error:
            reason = error.errors()[0]["msg"].removeprefix("Value error, ")
            logger.warning("%s is ignored: it %s", name, reason)
            return None
        return value if full else traces_url(value)

    def path(self, name: str) -> str | None:
        return self.text(name) or None

    def pairs(self, *names: str) -> dict[str, str]:
        """``key=value,...`` (percent-encoded, W3C baggage style) from the first one set."""
        raw = next((value for name in names if (value := self.text(name))), "")
        found: dict[str, str] = {}
        for position, item in enumerate(part for part in raw.split(",") if part.strip()):
            key, equals, value = item.partition("=")
            key, value = unquote(key.strip()), unquote(value.strip())
            if not equals or not _KEY.match(key) or not value.isprintable() or len(value) > 4096:
                logger.warning("%s: entry %d is not key=value; ignored", names[0], position + 1)
                continue
            if len(found) >= MAX_ENTRIES:
                logger.warning("%s: more than %d entries; the rest ignored", names[0], MAX_ENTRIES)
                break
            found[key] = value
        return found

    def millis(self, *names: str, default: int) -> int:
        name, value = next(((n, v) for n in names if (v := self.text(n))), (names[0], ""))
        if not value:
            return default
        if not _DIGITS.match(value) or not 0 < int(value) <= MAX_TIMEOUT_MS:
            logger.warning("%s must be milliseconds from 1 to %d; ignored", name, MAX_TIMEOUT_MS)
            return default
        return int(value)

    def count(self, name: str, default: int) -> int:
        value = self.text(name)
        if not value:
            return default
        if not _DIGITS.match(value) or not 0 < int(value) <= 1_000_000:
            logger.warning("%s must be a positive count; ignored", name)
            return default
        return int(value)

    def ratio(self, name: str) -> float:
        value = self.text(name)
        if not value:
            return 1.0
        try:
            ratio = float(value)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:  # NaN fails too
            logger.warning("%s must be a ratio from 0 to 1; keeping every trace", name)
            return 1.0
        return ratio

    def compression(self) -> Compression:
        value = (
            self.text("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
            or self.text("OTEL_EXPORTER_OTLP_COMPRESSION")
        ).lower()
        if value in ("gzip", "deflate"):
            return value
        if value not in ("", "none"):
            logger.warning("OTLP compression %r is not supported; not compressing", value[:100])
        return "none"
