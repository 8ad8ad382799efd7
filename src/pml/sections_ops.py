"""Settings sections for operating a gateway: ``[telemetry]`` and ``[log]`` (SPEC §11).

[telemetry]
traces = true                      # OpenTelemetry spans (also on with OTEL_* variables)
otlp_endpoint = "http://127.0.0.1:4318"
metrics_token = "..."              # a scrape token for GET /metrics (besides admin keys)

[log]
format = "json"                    # or "text"
level = "INFO"
levels = { "pml.upstream" = "DEBUG" }
access = true                      # one line per HTTP request and per tool call
slow_call_ms = 2000                # a warning for calls slower than this (0: off)
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LOGGER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$"
LoggerName = Annotated[str, StringConstraints(pattern=LOGGER_NAME_PATTERN)]
MAX_LOGGER_LEVELS = 100
MAX_SLOW_CALL_MS = 86_400_000.0  # a day: anything longer is a typo


class TelemetrySettings(BaseModel):
    """``[telemetry]``: OpenTelemetry traces (off by default) and access to ``/metrics``."""

    model_config = ConfigDict(extra="forbid")

    # Spans are exported when this is true, or when the standard OTEL_EXPORTER_OTLP_ENDPOINT
    # (or ..._TRACES_ENDPOINT) variable is set; OTEL_SDK_DISABLED=true turns both off.
    traces: bool = False
    # OTLP over HTTP/protobuf, a collector's base URL (/v1/traces is added) or its full
    # traces URL; None: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else http://localhost:4318.
    otlp_endpoint: str | None = Field(default=None, max_length=2000)
    # The resource's service.name; when not given here, OTEL_SERVICE_NAME, else "pml".
    service_name: str = Field(
        default="pml", min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    # The share of new traces kept (a client's sampled flag is followed); when not given
    # here, OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, else every trace.
    sample_ratio: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    # GET /metrics answers an admin key, or this bearer token (for a Prometheus scraper).
    metrics_token: str | None = Field(
        default=None, min_length=16, max_length=512, pattern=r"^[A-Za-z0-9\-._~+/]+=*$"
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _collector_url(cls, value: str | None) -> str | None:
        """Only ``http(s)://host[:port][/path]``: no credentials, query or control characters."""
        if value is None:
            return None
        if re.search(r"[\x00-\x20\x7f]", value):
            raise ValueError("must be a URL without spaces or control characters")
        try:
            parsed = urlsplit(value)
            port = parsed.port
        except ValueError as error:
            raise ValueError(f"is not a URL: {error}") from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if port == 0:
            raise ValueError("must name a port from 1 to 65535")
        if parsed.username is not None or parsed.password is not None:
            raise ValueError("must not hold credentials (use OTEL_EXPORTER_OTLP_HEADERS)")
        if parsed.query or parsed.fragment:
            raise ValueError("must not have a query or a fragment")
        return value


class LogSettings(BaseModel):
    """``[log]``: format, levels, the access log and the slow-call log (``docs/logging.md``)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["text", "json"] = "text"
    level: LogLevel = "WARNING"
    levels: dict[LoggerName, LogLevel] = Field(
        default_factory=dict[LoggerName, LogLevel], max_length=MAX_LOGGER_LEVELS
    )
    access: bool = False
    # A warning for tool calls, upstream calls and runs slower than this; 0 turns it off.
    slow_call_ms: float = Field(default=5000.0, ge=0, le=MAX_SLOW_CALL_MS, allow_inf_nan=False)

    @field_validator("format", mode="before")
    @classmethod
    def _lower_case_format(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("level", mode="before")
    @classmethod
    def _upper_case_level(cls, value: object) -> object:
        return _upper_case(value)

    @field_validator("levels", mode="before")
    @classmethod
    def _upper_case_levels(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        entries: dict[object, object] = value  # pyright: ignore[reportUnknownVariableType]
        return {name: _upper_case(level) for name, level in entries.items()}


def _upper_case(value: object) -> object:
    return value.upper() if isinstance(value, str) else value
