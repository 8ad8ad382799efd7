"""Every run of a capability enters its recent runs, through a real gateway and MCP client:
reuse in direct mode, calls by name and as an MCP tool (success and its own failures), a
failing snippet whose code is a capability's, a nested capability; and what does not count
against it (refused arguments)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest

from execution.conftest import Execute
from pml.registry.reliability import Reliability

pytestmark = pytest.mark.anyio

DIVIDE = "x = args.get('n', 1)\nreturn 10 / x"
FLAKY = """
if args.get("broken", False):
    return await mcp.a.fail(text="x")
return await mcp.a.echo(text="x")
"""


async def _signal(execute: Execute, name: str) -> Reliability:
    return Reliability.of_record(await execute.record(name))


async def test_runs_by_name_count_their_own_failures_not_refused_arguments(
    execute: Execute,
) -> None:
    await execute(code=DIVIDE, name="math:divide", intent="divide ten")
    await execute(capability="math:divide", args={"n": 2})
    failed = await execute.error(capability="math:divide", args={"n": 0})
    assert failed["code"] == "EXECUTION_FAILED"
    refused = await execute.error(capability="math:divide", args={"n": "x" * 10_000})
    assert refused["code"] == "INVALID_ARGS"
    seen = await _signal(execute, "math:divide")
    assert (seen.runs, seen.successes) == (3, 2)  # the refused call is not held against it
    record = await execute.record("math:divide")
    assert (record.usage_count, record.success_count) == (4, 2)  # totals count every call


async def test_tool_errors_by_name_and_as_an_mcp_tool_mark_it_failing(execute: Execute) -> None:
    await execute(code=FLAKY, name="a:flaky", intent="echo unless broken")
    error = await execute.error(capability="a:flaky", args={"broken": True})
    assert error["code"] == "TOOL_ERROR"
    for _ in range(2):
        result = await execute.client.call_tool("mcp__a__flaky", {"broken": True})
        assert result.is_error
    await execute.gateway.executor.flush()
    listed = await execute.client.call_tool("cap_list", {"pattern": "a:*"})
    block = listed.content[0]
    assert isinstance(block, mcp_types.TextContent)
    (item,) = json.loads(block.text)["items"]
    assert (item["recent_runs"], item["recent_success_rate"], item["failing"]) == (4, 0.25, True)
    for _ in range(3):
        result = await execute.client.call_tool("mcp__a__flaky", {})
        assert not result.is_error
    looked = await _lookup(execute, "a:flaky")
    assert (looked["recent_runs"], looked["recent_success_rate"]) == (7, round(4 / 7, 4))
    assert "failing" not in looked


async def test_a_failing_snippet_with_a_capabilitys_code_counts_against_it(
    execute: Execute,
) -> None:
    await execute(code=DIVIDE, name="math:divide")
    for _ in range(4):  # the same code, run directly, now fails
        error = await execute.error(code=DIVIDE, args={"n": 0})
        assert error["code"] == "EXECUTION_FAILED"
    other = "x = args.get('n', 1)\nreturn 20 / x"  # another code: counts for nothing
    await execute.error(code=other, args={"n": 0})
    seen = await _signal(execute, "math:divide")
    assert (seen.runs, seen.successes, seen.failing) == (5, 1, True)
    looked = await _lookup(execute, "math:divide")
    assert looked["failing"] is True
    assert looked["recent_success_rate"] == 0.2
    for _ in range(4):  # works again: reuse in direct mode counts its successes
        assert (await execute(code=DIVIDE, args={"n": 5}))["created"] is False
    assert "failing" not in await _lookup(execute, "math:divide")


async def test_a_nested_capability_counts_its_own_failure_not_bad_arguments(
    execute: Execute,
) -> None:
    await execute(code=DIVIDE, name="math:divide")
    code = """
try:
    return await mcp.math.divide(n=args.get("n", 0))
except ToolError as error:
    return "caught"
"""
    assert (await execute(code=code))["result"] == "caught"  # ZeroDivisionError inside
    # arguments its schema refuses: a ToolError for the snippet, not held against it
    assert (await execute(code=code, args={"n": "bad"}))["result"] == "caught"
    seen = await _signal(execute, "math:divide")
    assert (seen.runs, seen.successes) == (2, 1)


async def test_hostile_lookups_are_refused(
    execute: Execute,
) -> None:
    await execute(code=DIVIDE, name="math:divide")
    for hostile in ("math:divide' OR 1=1 --", "\u202emath:divide", "x" * 20_000):
        result = await execute.client.call_tool("cap_lookup", {"name": hostile})
        assert result.is_error
    assert "failing" not in await _lookup(execute, "math:divide")


async def _lookup(execute: Execute, name: str) -> dict[str, Any]:
    await execute.gateway.executor.flush()
    result = await execute.client.call_tool("cap_lookup", {"name": name})
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return json.loads(block.text)
