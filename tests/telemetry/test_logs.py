"""``[log]`` applied to a process: JSON or text lines on stderr, levels per logger, the access
log of HTTP requests and tool calls (never arguments or keys), the slow-call warning, and
settings that refuse odd values. The last tests run a real ``pml serve``."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import AsyncGenerator, Generator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import tomli_w

from e2e.support import (
    PML,
    Upstream,
    create_key,
    http_client,
    pml_http,
    python_server,
    sqlite_url,
    write_config,
)
from pml.config import load_settings
from pml.errors import ConfigError
from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.sections_ops import LogSettings
from pml.telemetry import logs, observe
from policy.conftest import (  # noqa: F401 - the fixture is re-used here
    SCOPE,
    OpenPolicyGateway,
    PolicyGateway,
    open_policy_gateway,
)

pytestmark = pytest.mark.anyio

SECRET_ARGUMENT = "s3cret-argument-value"


@pytest.fixture(autouse=True)
def restored_logging() -> Generator[None]:
    """Each test configures the process's logging; put it back as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        logs.reset()
        root.handlers[:] = handlers
        root.setLevel(level)


def lines(err: str) -> list[dict[str, Any]]:
    """stderr as JSON objects, one per line (fails on a line that is not one)."""
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def access_lines(err: str, event: str) -> list[dict[str, Any]]:
    found = [line for line in err.splitlines() if f'"event":"{event}"' in line]
    return [json.loads(line) for line in found]


# -- format and levels -------------------------------------------------------------------------


def test_json_lines_carry_time_level_logger_message_and_extra_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(LogSettings(format="json", level="INFO"))

    logging.getLogger("pml.upstream.pool").info("server %s started", "time", extra={"pid": 42})

    [line] = lines(capsys.readouterr().err)
    assert line["level"] == "INFO"
    assert line["logger"] == "pml.upstream.pool"
    assert line["message"] == "server time started"
    assert line["pid"] == 42
    assert line["time"].endswith("Z")
    assert "T" in line["time"]


def test_a_message_with_newlines_and_an_exception_stays_one_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(LogSettings(format="json"))

    try:
        raise ValueError("broken\nin two")
    except ValueError:
        logging.getLogger("pml.test").exception('forged\n{"level": "INFO"}')

    [line] = lines(capsys.readouterr().err)
    assert line["message"] == 'forged\n{"level": "INFO"}'
    assert line["level"] == "ERROR"
    assert "ValueError: broken" in line["exception"]


def test_text_lines_give_the_time_level_and_logger(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(LogSettings(format="text"))

    logging.getLogger("pml.gateway").warning("careful")

    err = capsys.readouterr().err
    assert err.endswith(" WARNING pml.gateway: careful\n")
    assert err[:4].isdigit()


def test_the_level_and_each_loggers_level_decide_what_is_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(LogSettings(format="json", level="ERROR", levels={"pml.upstream": "DEBUG"}))

    logging.getLogger("pml.upstream.pool").debug("shown")
    logging.getLogger("pml.gateway").warning("hidden")

    assert [line["message"] for line in lines(capsys.readouterr().err)] == ["shown"]


def test_configuring_again_replaces_the_handler_and_drops_old_logger_levels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(LogSettings(format="json", levels={"pml.upstream": "DEBUG"}))
    logs.configure(LogSettings(format="json", level="WARNING"))

    logging.getLogger("pml.upstream.pool").debug("dropped")
    logging.getLogger("pml.upstream.pool").warning("once")

    assert [line["message"] for line in lines(capsys.readouterr().err)] == ["once"]
    named = [h for h in logging.getLogger().handlers if h.get_name() == logs.HANDLER_NAME]
    assert len(named) == 1


def test_lines_go_to_the_stderr_of_the_moment_even_after_a_borrowed_one_closed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    borrowed = io.StringIO()
    real, sys.stderr = sys.stderr, borrowed  # e.g. a CLI runner serving in-process
    try:
        logs.configure(LogSettings(format="json"))
    finally:
        sys.stderr = real
    borrowed.close()

    logging.getLogger("pml.gateway").warning("still written")

    assert [line["message"] for line in lines(capsys.readouterr().err)] == ["still written"]


# -- the access log ----------------------------------------------------------------------------


@pytest.fixture
async def pg(
    open_policy_gateway: OpenPolicyGateway,  # noqa: F811
) -> AsyncGenerator[PolicyGateway]:
    async with open_policy_gateway() as opened:
        yield opened


async def test_a_tool_call_is_one_access_line_without_its_arguments(
    pg: PolicyGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure(LogSettings(format="text", access=True, slow_call_ms=0))

    result = await pg.call("time__get_current_time", {"timezone": SECRET_ARGUMENT})
    assert not result.is_error

    err = capsys.readouterr().err
    [line] = access_lines(err, "tool_call")
    assert line["logger"] == "pml.access"
    assert line["tool"] == "time__get_current_time"
    assert (line["lane"], line["outcome"], line["user"]) == ("mcp", "ok", SCOPE.user)
    assert line["duration_ms"] >= 0
    assert SECRET_ARGUMENT not in err


async def test_without_access_no_access_line_is_written(
    pg: PolicyGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure(LogSettings(format="json", level="DEBUG", access=False, slow_call_ms=0))

    await pg.call("time__get_current_time", {})

    assert not [line for line in lines(capsys.readouterr().err) if line["logger"] == "pml.access"]


async def test_each_http_request_is_one_access_line_with_the_key_prefix_never_the_key(
    pg: PolicyGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = ApiKeys(pg.gateway.db)
    admin_key, listed = await keys.create(SCOPE.org, SCOPE.project, "ana", role="admin")
    logs.configure(LogSettings(access=True, slow_call_ms=0))
    transport = httpx.ASGITransport(app=create_app(pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        health = await http.get("/health")
        found = await http.get(
            f"/api/capabilities?pattern={SECRET_ARGUMENT}",
            headers={"Authorization": f"Bearer {admin_key}"},
        )
        refused = await http.get("/api/audit", headers={"Authorization": "Bearer pml_wrong"})
        odd = await http.get("/api/%0A%22forged%22:1,%22x/\u00e9")

    err = capsys.readouterr().err
    seen = access_lines(err, "http")
    assert [(line["method"], line["path"], line["status"]) for line in seen] == [
        ("GET", "/health", 200),
        ("GET", "/api/capabilities", 200),
        ("GET", "/api/audit", 401),
        ("GET", '/api/\n"forged":1,"x/é', 401),
    ]
    assert seen[0]["bytes"] == len(health.content)
    assert seen[1]["bytes"] == len(found.content)
    assert seen[2]["bytes"] == len(refused.content)
    assert odd.status_code == 401
    assert (seen[1]["key"], seen[1]["user"]) == (listed.prefix, "ana")
    assert admin_key.startswith(listed.prefix)
    assert len(listed.prefix) < len(admin_key) / 2
    assert (seen[0]["key"], seen[2]["key"]) == ("", "")
    assert admin_key not in err
    assert SECRET_ARGUMENT not in err
    assert all(line["duration_ms"] >= 0 for line in seen)


# -- the slow-call warning ---------------------------------------------------------------------


async def test_a_call_slower_than_the_threshold_is_a_warning(
    pg: PolicyGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure(LogSettings(format="json", slow_call_ms=0.000001))

    await pg.call("time__get_current_time", {"timezone": SECRET_ARGUMENT})

    err = capsys.readouterr().err
    slow = [line for line in lines(err) if line["logger"] == "pml.slow"]
    kinds = {line["kind"] for line in slow}
    assert kinds == {"tool_call", "upstream_call"}
    assert all(line["level"] == "WARNING" and line["threshold_ms"] > 0 for line in slow)
    upstream = next(line for line in slow if line["kind"] == "upstream_call")
    assert (upstream["server"], upstream["tool"]) == ("time", "get_current_time")
    assert SECRET_ARGUMENT not in err


async def test_no_slow_call_warning_under_the_threshold_or_when_off(
    pg: PolicyGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    for threshold in (0.0, 3_600_000.0):
        logs.configure(LogSettings(format="json", slow_call_ms=threshold))
        await pg.call("time__get_current_time", {})

    assert not [line for line in lines(capsys.readouterr().err) if line["logger"] == "pml.slow"]


def test_a_slow_runs_warning_names_its_mode_and_a_hostile_tool_name_stays_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(LogSettings(format="text", slow_call_ms=0.000001))

    with observe.step("execute", mode="code"):
        pass
    with observe.step("tool_call", tool='evil\nWARNING pml.fake: forged "x"', lane="stdio"):
        pass

    text = capsys.readouterr().err.splitlines()
    assert len(text) == 2
    assert 'slow execute (mode="code")' in text[0]
    assert "forged" in text[1]
    assert "\\n" in text[1]


def test_reset_stops_watching_steps() -> None:
    logs.configure(LogSettings(access=True))
    assert any(isinstance(o, logs.LogObserver) for o in observe.observers())

    logs.reset()

    assert not any(isinstance(o, logs.LogObserver) for o in observe.observers())


# -- settings that are refused ----------------------------------------------------------------


BAD_LOG_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"format": "xml"}, "log.format"),
    ({"format": 3}, "log.format"),
    ({"level": "LOUD"}, "log.level"),
    ({"level": ""}, "log.level"),
    ({"levels": {"pml upstream": "INFO"}}, "log.levels"),
    ({"levels": {"pml.upstream": "VERBOSE"}}, "log.levels"),
    ({"levels": {"pml.x\n": "INFO"}}, "log.levels"),
    ({"levels": {f"pml.l{i}": "INFO" for i in range(101)}}, "log.levels"),
    ({"levels": "DEBUG"}, "log.levels"),
    ({"slow_call_ms": -1}, "log.slow_call_ms"),
    ({"slow_call_ms": float("nan")}, "log.slow_call_ms"),
    ({"slow_call_ms": float("inf")}, "log.slow_call_ms"),
    ({"slow_call_ms": 1e12}, "log.slow_call_ms"),
    ({"slow_call_ms": "fast"}, "log.slow_call_ms"),
    ({"access": [True]}, "log.access"),
    ({"colour": "yes"}, "log.colour"),
]


@pytest.mark.parametrize(("table", "field"), BAD_LOG_SETTINGS)
def test_odd_log_settings_are_a_config_error_naming_the_field(
    tmp_path: Path, table: dict[str, Any], field: str
) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(tomli_w.dumps({"log": table}))

    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})

    assert field in refused.value.message
    assert "\n" not in refused.value.message.strip()


def test_levels_are_accepted_in_any_case(tmp_path: Path) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(
        tomli_w.dumps({"log": {"format": "JSON", "level": "info", "levels": {"pml": "Debug"}}})
    )

    settings = load_settings(config, environ={})

    assert (settings.log.format, settings.log.level) == ("json", "INFO")
    assert settings.log.levels == {"pml": "DEBUG"}


def test_pml_serve_refuses_a_bad_log_level_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(tomli_w.dumps({"database_url": sqlite_url(tmp_path), "log": {"level": "x"}}))

    done = subprocess.run(
        [str(PML), "--config", str(config), "serve", "--http", "127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )

    assert done.returncode != 0
    assert "log.level" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


# -- a real pml serve --------------------------------------------------------------------------


def _config(tmp_path: Path, **log: Any) -> Path:
    time_server = Upstream(
        "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
    )
    return write_config(
        tmp_path / "pml.toml",
        [time_server],
        database_url=sqlite_url(tmp_path),
        extra={"log": log},
    )


@pytest.mark.e2e
async def test_pml_serve_http_writes_json_lines_only_and_an_access_line_per_request(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, format="json", level="INFO", access=True, slow_call_ms=0.000001)
    key = create_key(config, "local", "default")["key"]
    log = tmp_path / "pml.log"
    with pml_http(config, log) as gateway:
        async with http_client(gateway.mcp_url, key) as client:
            result = await client.call_tool("time__get_current_time", {"timezone": SECRET_ARGUMENT})
        async with httpx.AsyncClient(timeout=10.0) as http:
            refused = await http.get(f"{gateway.base_url}/metrics")
    assert result.is_error  # the timezone is made up: the call still ran
    assert refused.status_code == 401

    printed = log.read_text()
    body = [line for line in printed.splitlines() if not line.startswith("PML gateway:")]
    parsed = [json.loads(line) for line in body if line.strip()]  # every line is JSON
    http_lines = [line for line in parsed if line.get("event") == "http"]
    tool_lines = [line for line in parsed if line.get("event") == "tool_call"]
    assert {(line["method"], line["path"]) for line in http_lines} >= {
        ("POST", "/mcp"),
        ("GET", "/metrics"),
        ("GET", "/health"),
    }
    mcp_lines = [line for line in http_lines if line["path"] == "/mcp"]
    assert all(key.startswith(line["key"]) and line["key"] for line in mcp_lines)
    assert [line["tool"] for line in tool_lines] == ["time__get_current_time"]
    assert tool_lines[0]["outcome"] == "tool_error"
    assert key.startswith(tool_lines[0]["key"])
    assert tool_lines[0]["key"]
    assert any(line.get("logger") == "pml.slow" for line in parsed)
    assert key not in printed
    assert SECRET_ARGUMENT not in printed


@pytest.mark.e2e
async def test_pml_serve_stdio_keeps_stdout_for_the_protocol_and_logs_on_stderr(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, format="json", level="DEBUG", access=True, slow_call_ms=0.000001)
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}},
        },
    ]
    command = [str(PML), "--config", str(config), "serve", "--stdio"]
    answers: list[dict[str, Any]] = []
    log = tmp_path / "stderr.log"
    with anyio.fail_after(60), log.open("wb") as stderr:  # a file: DEBUG never fills a pipe
        async with await anyio.open_process(command, cwd=tmp_path, stderr=stderr) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            buffered = b""
            # a call after the handshake and a listing: the stdio fast lane takes it
            for sent, awaited in ((messages[:2], 1), (messages[2:3], 2), (messages[3:], 3)):
                await process.stdin.send(b"".join(json.dumps(m).encode() + b"\n" for m in sent))
                while not any(answer.get("id") == awaited for answer in answers):
                    buffered += await process.stdout.receive()
                    *complete, buffered = buffered.split(b"\n")
                    answers.extend(json.loads(line) for line in complete if line.strip())
            await process.stdin.aclose()
            await process.wait()
    err = log.read_bytes()

    assert all(answer["jsonrpc"] == "2.0" for answer in answers)  # nothing else on stdout
    assert answers[-1]["result"]["isError"] is False
    logged = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    [access] = [line for line in logged if line.get("event") == "tool_call"]
    assert (access["tool"], access["lane"], access["outcome"]) == (
        "time__get_current_time",
        "stdio",
        "ok",
    )
    assert any(line["level"] == "DEBUG" for line in logged)
