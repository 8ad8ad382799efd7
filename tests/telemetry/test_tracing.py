"""Turning traces on and off: ``[telemetry]``, the ``OTEL_*`` variables, a real collector.

Spans go to a local OTLP/HTTP receiver on loopback (``otlp_receiver``); the exporter,
batching and shutdown are the real ones of ``tracing.exporting``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry import trace

from pml.config import load_settings
from pml.errors import ConfigError
from pml.sections_ops import TelemetrySettings
from pml.telemetry import observe, otlp, tracing
from pml.telemetry.trace_settings import SamplerChoice, trace_export
from telemetry.otlp_receiver import (
    named,
    otlp_receiver,
    silent_endpoint,
    unreachable_endpoint,
)

REPO = Path(__file__).resolve().parents[2]


def on(**fields: object) -> TelemetrySettings:
    return TelemetrySettings.model_validate({"traces": True, **fields})


# -- when traces are on, and where they go -----------------------------------------------------


def test_traces_are_off_without_settings_or_otel_variables() -> None:
    assert trace_export(TelemetrySettings(), {}) is None
    assert trace_export(TelemetrySettings(), {"OTEL_SERVICE_NAME": "x", "PATH": "/bin"}) is None


def test_traces_true_exports_to_the_otlp_default_endpoint() -> None:
    chosen = trace_export(on(), {})
    assert chosen is not None
    assert chosen.endpoint == "http://localhost:4318/v1/traces"
    assert chosen.service_name == "pml"
    assert chosen.sampler == SamplerChoice("on", 1.0, parent_based=True)


def test_the_otlp_endpoint_variable_turns_traces_on_with_the_traces_path() -> None:
    chosen = trace_export(TelemetrySettings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert chosen is not None
    assert chosen.endpoint == "http://c:4318/v1/traces"


def test_the_traces_endpoint_variable_is_used_as_given_and_wins() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/custom/path",
    }
    chosen = trace_export(TelemetrySettings(), environ)
    assert chosen is not None
    assert chosen.endpoint == "https://traces.example/custom/path"


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
        ("https://otel.example/v1/traces", "https://otel.example/v1/traces"),
    ],
)
def test_the_configured_endpoint_wins_over_the_variables(configured: str, expected: str) -> None:
    environ = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/v1/traces"}
    chosen = trace_export(on(otlp_endpoint=configured), environ)
    assert chosen is not None
    assert chosen.endpoint == expected


@pytest.mark.parametrize("value", ["true", "TRUE", " true "])
def test_otel_sdk_disabled_turns_traces_off_even_when_configured(value: str) -> None:
    environ = {"OTEL_SDK_DISABLED": value, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert trace_export(on(), environ) is None


def test_otel_traces_exporter_none_turns_traces_off() -> None:
    assert trace_export(on(), {"OTEL_TRACES_EXPORTER": "none"}) is None
    assert trace_export(on(), {"OTEL_TRACES_EXPORTER": "otlp"}) is not None


def test_the_service_name_comes_from_settings_then_the_variables_then_pml() -> None:
    resource = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-resource,deployment.env=prod"}
    named_too = {**resource, "OTEL_SERVICE_NAME": "from-variable"}
    chosen = [
        trace_export(on(service_name="from-settings"), named_too),
        trace_export(on(), named_too),
        trace_export(on(), resource),
        trace_export(on(), {}),
    ]
    assert [c.service_name if c else None for c in chosen] == [
        "from-settings",
        "from-variable",
        "from-resource",
        "pml",
    ]
    assert chosen[2] is not None
    assert chosen[2].resource["deployment.env"] == "prod"


def test_the_sample_ratio_setting_wins_over_the_sampler_variables() -> None:
    environ = {"OTEL_TRACES_SAMPLER": "always_off"}
    chosen = trace_export(on(sample_ratio=0.25), environ)
    assert chosen is not None
    assert chosen.sampler == SamplerChoice("ratio", 0.25, parent_based=True)


@pytest.mark.parametrize(
    ("sampler", "argument", "expected"),
    [
        ("always_on", "", SamplerChoice("on", 1.0, parent_based=False)),
        ("always_off", "", SamplerChoice("off", 0.0, parent_based=False)),
        ("traceidratio", "0.1", SamplerChoice("ratio", 0.1, parent_based=False)),
        ("parentbased_always_off", "", SamplerChoice("off", 0.0, parent_based=True)),
        ("parentbased_traceidratio", "0.5", SamplerChoice("ratio", 0.5, parent_based=True)),
        ("PARENTBASED_ALWAYS_ON", "", SamplerChoice("on", 1.0, parent_based=True)),
    ],
)
def test_the_standard_sampler_variables_choose_the_sampler(
    sampler: str, argument: str, expected: SamplerChoice
) -> None:
    environ = {"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": argument}
    chosen = trace_export(on(), environ)
    assert chosen is not None
    assert chosen.sampler == expected


def test_otlp_settings_variables_reach_the_export() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=acme,authorization=Bearer%20s3cret",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "50",
    }
    chosen = trace_export(on(), environ)
    assert chosen is not None
    assert dict(chosen.headers) == {"x-tenant": "acme", "authorization": "Bearer s3cret"}
    assert chosen.timeout_s == 2.5
    assert chosen.compression == "gzip"
    assert (chosen.batching.schedule_delay_ms, chosen.batching.max_queue_size) == (200, 100)
    assert chosen.batching.max_export_batch_size == 50
    assert "s3cret" not in repr(chosen)


HOSTILE_VARIABLES = [
    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "abc"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "-5"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "١٠"),  # Arabic-Indic digits
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "9" * 5000),
    ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign,=empty-key,bad key=v"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "k=\x00\n"),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "99999"),
    ("OTEL_SERVICE_NAME", "evil\nname"),
    ("OTEL_SDK_DISABLED", "maybe"),
    ("OTEL_RESOURCE_ATTRIBUTES", ",".join(f"k{i}=v" for i in range(500))),
]


@pytest.mark.parametrize(("name", "value"), HOSTILE_VARIABLES)
def test_a_malformed_otel_variable_is_ignored_with_a_warning(
    name: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    chosen = trace_export(on(), {name: value})
    assert chosen is not None  # traces stay on, with the default for what was malformed
    default = trace_export(on(), {})
    assert default is not None
    assert chosen.endpoint == default.endpoint
    assert chosen.timeout_s == default.timeout_s
    assert chosen.sampler == default.sampler
    assert chosen.service_name == "pml"
    assert len(chosen.resource) <= 64
    assert any(record.levelno == logging.WARNING for record in caplog.records)


@pytest.mark.parametrize("argument", ["nan", "2", "-0.5", "half", "1e400"])
def test_a_malformed_sampler_ratio_keeps_every_trace_with_a_warning(
    argument: str, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": argument}
    chosen = trace_export(on(), environ)
    assert chosen is not None
    assert chosen.sampler == SamplerChoice("ratio", 1.0, parent_based=False)
    assert "OTEL_TRACES_SAMPLER_ARG must be a ratio" in caplog.text


@pytest.mark.parametrize("endpoint", ["ftp://c:21", "not a url", "http://", "http://u:p@c:4318"])
def test_a_malformed_endpoint_variable_is_ignored_and_does_not_turn_traces_on(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert trace_export(TelemetrySettings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}) is None
    assert "OTEL_EXPORTER_OTLP_ENDPOINT is ignored" in caplog.text
    assert "u:p" not in caplog.text


def test_header_values_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=s3cret-token,bad key=s3cret-other"}
    caplog.set_level(logging.DEBUG)
    trace_export(on(), environ)
    assert "entry 2 is not key=value" in caplog.text
    assert "s3cret" not in caplog.text


BAD_TELEMETRY = [
    ("traces = 'perhaps'", "telemetry.traces"),
    ("traces = 3", "telemetry.traces"),
    ("otlp_endpoint = 'ftp://collector:21'", "telemetry.otlp_endpoint"),
    ("otlp_endpoint = 'http://user:secret@collector:4318'", "telemetry.otlp_endpoint"),
    ('otlp_endpoint = "http://collector:4318/\\u0000"', "telemetry.otlp_endpoint"),
    ("otlp_endpoint = 'http://collector:99999'", "telemetry.otlp_endpoint"),
    ("otlp_endpoint = 'http://c/?token=x'", "telemetry.otlp_endpoint"),
    ("otlp_endpoint = 'http://c/" + "a" * 3000 + "'", "telemetry.otlp_endpoint"),
    ("sample_ratio = 2", "telemetry.sample_ratio"),
    ("sample_ratio = -0.1", "telemetry.sample_ratio"),
    ("sample_ratio = nan", "telemetry.sample_ratio"),
    ("sample_ratio = 'half'", "telemetry.sample_ratio"),
    ("service_name = ''", "telemetry.service_name"),
    ('service_name = "a\\nb"', "telemetry.service_name"),
    ("service_name = '" + "x" * 201 + "'", "telemetry.service_name"),
    ("tracing = true", "telemetry.tracing"),
]


@pytest.mark.parametrize(("line", "field"), BAD_TELEMETRY)
def test_bad_telemetry_values_are_config_errors_naming_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(f"[telemetry]\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, environ={})
    assert field in caught.value.message
    assert "secret" not in caught.value.message


# -- exporting to a real collector ------------------------------------------------------------


def test_nothing_is_installed_or_imported_when_traces_are_off() -> None:
    script = (
        "import sys\n"
        "from pml.sections_ops import TelemetrySettings\n"
        "from pml.telemetry import observe, tracing\n"
        "with tracing.exporting(TelemetrySettings(), {'OTEL_SERVICE_NAME': 'x'}):\n"
        "    state = [tracing.active(), len(observe.observers())]\n"
        "    state += [name in sys.modules for name in ('opentelemetry', 'pml.telemetry.spans')]\n"
        "print(state)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, 0, False, False]"


def test_steps_reach_the_collector_as_one_trace_with_the_service_resource() -> None:
    before = observe.observers()
    with otlp_receiver() as receiver:
        settings = on(otlp_endpoint=receiver.endpoint, service_name="pml-test")
        environ = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"}
        with tracing.exporting(settings, environ):
            assert tracing.active()
            with observe.step("tool_call", tool="t", lane="mcp"), observe.step("execute"):
                pass
        assert not tracing.active()
        assert observe.observers() == before
        spans = receiver.snapshot()  # the exit flushed everything
    tool_call, execute = named(spans, "tool_call")[0], named(spans, "execute")[0]
    assert execute.parent_span_id == tool_call.span_id
    assert execute.trace_id == tool_call.trace_id
    assert tool_call.resource["service.name"] == "pml-test"
    assert tool_call.resource["deployment.environment"] == "test"
    assert tool_call.scope == "pml"


def test_exporting_again_in_one_process_follows_the_new_settings() -> None:
    sdk_tracer = trace.get_tracer("mcp-python-sdk-like")  # bound once, like the SDK's own
    with otlp_receiver() as first, otlp_receiver() as second:
        for receiver, name in ((first, "one"), (second, "two")):
            settings = on(otlp_endpoint=receiver.endpoint, service_name=name)
            with tracing.exporting(settings, {}), sdk_tracer.start_as_current_span("sdk span"):
                pass
        with sdk_tracer.start_as_current_span("after the end") as after:
            assert not after.is_recording()
        for receiver, name in ((first, "one"), (second, "two")):
            [span] = receiver.snapshot()
            assert (span.name, span.resource["service.name"]) == ("sdk span", name)


def test_the_otlp_headers_variable_is_sent_to_the_collector_gzipped() -> None:
    with otlp_receiver() as receiver:
        environ = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-scope-orgid=acme",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        }
        with tracing.exporting(TelemetrySettings(), environ), observe.step("sandbox"):
            pass
        [request] = receiver.requests
    assert request["x-scope-orgid"] == "acme"
    assert request["content-encoding"] == "gzip"
    assert named(receiver.snapshot(), "sandbox")


def test_a_refusing_collector_is_warned_about_and_the_gateway_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with unreachable_endpoint() as endpoint:
        environ = {"OTEL_BSP_SCHEDULE_DELAY": "10", "OTEL_EXPORTER_OTLP_TIMEOUT": "200"}
        with tracing.exporting(on(otlp_endpoint=endpoint), environ):
            for _ in range(50):
                with observe.step("upstream_call", server="s", tool="t"):
                    pass
            started = time.monotonic()
        stopped_in = time.monotonic() - started
    assert stopped_in < otlp.SHUTDOWN_GRACE_S * 1.5 + 1.0
    assert "traces: spans could not be sent to http://127.0.0.1:" in caplog.text


def test_a_collector_that_never_answers_delays_shutdown_a_bounded_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with silent_endpoint() as endpoint:
        with tracing.exporting(on(otlp_endpoint=endpoint), {}):
            with observe.step("sandbox"):
                pass
            started = time.monotonic()
        stopped_in = time.monotonic() - started
    assert stopped_in < otlp.SHUTDOWN_GRACE_S * 1.5 + 1.0
    assert "did not answer at shutdown" in caplog.text


def test_the_overhead_benchmark_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "tracing_overhead.py"), "--n", "300"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("step_off_us", "step_on_us", "call_off_us", "call_on_us"):
        assert isinstance(printed[key], float)
        assert printed[key] > 0
    assert printed["n"] == 300
