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

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LOGGER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$"
LoggerName = Annotated[str, StringConstraints(pattern=LOGGER_NAME_PATTERN)]


class TelemetrySettings(BaseModel):
    """``[telemetry]``: OpenTelemetry traces (off by default) and access to ``/metrics``."""

    model_config = ConfigDict(extra="forbid")

    # Spans are exported when this is true, or when the standard OTEL_EXPORTER_OTLP_ENDPOINT
    # (or ..._TRACES_ENDPOINT) variable is set and OTEL_SDK_DISABLED is not "true".
    traces: bool = False
    # OTLP over HTTP/protobuf; None: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else the OTLP
    # default http://localhost:4318.
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://")
    service_name: str = Field(default="pml", min_length=1, max_length=200)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    # GET /metrics answers an admin key, or this bearer token (for a Prometheus scraper).
    metrics_token: str | None = Field(default=None, min_length=16, max_length=512)


class LogSettings(BaseModel):
    """``[log]``: format, levels, the access log and the slow-call log."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["text", "json"] = "text"
    level: LogLevel = "WARNING"
    levels: dict[LoggerName, LogLevel] = Field(default_factory=dict[LoggerName, LogLevel])
    access: bool = False
    slow_call_ms: float = Field(default=5000.0, ge=0)
