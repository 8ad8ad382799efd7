"""``pml_execute`` failures: each SPEC §5 code, with its message, and nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from execution.conftest import Execute
from gateway.upstreams import NO_SUCH_COMMAND, Upstream, gateway_settings
from pml.config import ServerSettings
from pml.gateway.server import open_gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

NOTHING = {"records": 0, "versions": 0, "traces": 0}


async def test_code_over_the_limit_is_refused_with_the_exact_message(execute: Execute) -> None:
    code = "x = 1\n" * 20_000  # 120 000 bytes, limit 100 000
    error = await execute.error(code=code)
    assert error["code"] == "CODE_TOO_LARGE"
    assert error["message"] == "Code size exceeds maximum: 120000 bytes (max: 100000)"
    assert await execute.stored() == NOTHING


async def test_a_syntax_error_names_line_and_column(execute: Execute) -> None:
    error = await execute.error(code="x = 1\ny = (2 +\nreturn y")
    assert error["code"] == "SYNTAX_ERROR"
    assert "line 2" in error["message"] or "line 3" in error["message"]
    assert "column" in error["message"]


async def test_unknown_servers_and_tools_are_listed_with_close_matches(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = "x = await mcp.a.ehco(text='x')\ny = await mcp.bb.echo()\nreturn await mcp.a.echo()"
    error = await execute.error(code=code)
    assert error["code"] == "UNKNOWN_TOOL"
    assert "mcp.a.ehco at line 1" in error["message"]
    assert "did you mean mcp.a.echo" in error["message"]
    assert "mcp.bb.echo at line 2" in error["message"]
    assert "did you mean server b" in error["message"] or "server a" in error["message"]
    assert len(error["unknown"]) == 2
    assert upstreams["a"].calls == []  # nothing ran
    assert await execute.stored() == NOTHING


async def test_an_exception_in_the_snippet_names_its_type_and_line(execute: Execute) -> None:
    error = await execute.error(code="x = 1\ny = x / 0\nreturn y")
    assert error["code"] == "EXECUTION_FAILED"
    assert "ZeroDivisionError" in error["message"]
    assert "line 2" in error["message"]
    assert await execute.stored() == NOTHING


async def test_the_wall_time_limit_stops_an_endless_loop(execute: Execute) -> None:
    error = await execute.error(code="while True:\n    pass", options={"timeout_ms": 300})
    assert error["code"] == "TIMEOUT"
    assert await execute.stored() == NOTHING


async def test_too_many_tool_calls_is_a_limit(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = "for i in range(10000):\n    await mcp.a.echo(text='x')\nreturn 1"
    error = await execute.error(code=code)
    assert error["code"] == "LIMIT_EXCEEDED"
    assert len(upstreams["a"].calls) <= 200
    assert await execute.stored() == NOTHING


async def test_a_call_the_code_does_not_name_is_refused(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = "m = mcp\nawait mcp.a.echo(text='ok')\nreturn await m.b.echo(text='forged')"
    error = await execute.error(code=code)
    assert error["code"] in ("PERMISSION_DENIED", "INVALID_INPUT", "UNKNOWN_TOOL")
    assert upstreams["b"].calls == []
    assert await execute.stored() == NOTHING


async def test_a_result_that_is_not_json_fails_cleanly(execute: Execute) -> None:
    error = await execute.error(code="return {1, 2, 3}")
    assert error["code"] in ("EXECUTION_FAILED", "LIMIT_EXCEEDED")
    assert "JSON" in error["message"]
    assert await execute.stored() == NOTHING


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"code": "return 1", "capability": "x"}, "code"),
        ({"intent": "   ", "code": "return 1"}, "intent"),
        ({"intent": 5, "code": "return 1"}, "intent"),
        ({"code": 123}, "code"),
        ({"code": "return 1", "args": [1, 2]}, "args"),
        ({"code": "return 1", "routing": "moon"}, "routing"),
        ({"code": "return 1", "update": "yes"}, "update"),
        ({"code": "return 1", "options": {"timeout_ms": -5}}, "timeout_ms"),
        ({"code": "return 1", "surprise": True}, "surprise"),
        ({"intent": "x" * 10_001, "code": "return 1"}, "intent"),
    ],
    ids=[
        "both-modes",
        "blank-intent",
        "int-intent",
        "int-code",
        "list-args",
        "bad-routing",
        "str-update",
        "negative-timeout",
        "unknown-field",
        "huge-intent",
    ],
)
async def test_malformed_input_is_invalid_input_naming_the_field(
    execute: Execute, arguments: dict[str, Any], field: str
) -> None:
    error = await execute.error(**arguments)
    assert error["code"] == "INVALID_INPUT"
    assert field in error["message"]
    assert await execute.stored() == NOTHING


async def test_sql_in_a_result_is_only_data(execute: Execute) -> None:
    answer = await execute(code='return "\'); DELETE FROM capability_records; --"')
    assert answer["result"] == "'); DELETE FROM capability_records; --"
    assert (await execute.stored())["records"] == 1


@pytest.mark.parametrize(
    "code",
    ["'; DROP TABLE capability_records; --", "return 1\x00", "def (:"],
    ids=["sql-as-code", "null-byte", "garbage"],
)
async def test_code_that_does_not_parse_changes_nothing(execute: Execute, code: str) -> None:
    error = await execute.error(code=code)
    assert error["code"] == "SYNTAX_ERROR"
    assert await execute.stored() == NOTHING


async def test_a_lone_surrogate_in_a_result_fails_cleanly_or_round_trips(execute: Execute) -> None:
    data = await execute(code="return 'a\\ud800b'")
    if data["status"] == "error":
        assert await execute.stored() == NOTHING
    else:
        assert isinstance(data["result"], str)


async def test_a_server_that_cannot_start_is_upstream_unavailable(sqlite_url: str) -> None:
    pool = ClientPool({"broken": ServerSettings(command=NO_SUCH_COMMAND)})
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
        execute = Execute(client, gateway)
        error = await execute.error(code="return await mcp.broken.anything(x=1)")
        assert error["code"] == "UPSTREAM_UNAVAILABLE"
        assert "broken" in error["message"]
        assert await execute.stored() == NOTHING
