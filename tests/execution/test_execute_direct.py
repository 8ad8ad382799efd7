"""``pml_execute`` direct mode through a real SDK client: run, capture, reuse, name, update."""

from __future__ import annotations

import re

import pytest

from execution.conftest import FQDN, Execute
from gateway.upstreams import UNICODE_TEXT, Upstream

pytestmark = pytest.mark.anyio

TWO_SERVERS = """
first = await mcp.a.echo(text="hello")
second = await mcp.b.echo(text=args["word"])
print("called", first["server"], second["server"])
return {"a": first["args"]["text"], "b": second["args"]["text"]}
"""


async def test_a_snippet_calling_two_servers_runs_and_becomes_a_capability(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    answer = await execute(code=TWO_SERVERS, args={"word": "world"}, intent="greet two servers")
    assert answer["status"] == "success"
    assert answer["result"] == {"a": "hello", "b": "world"}
    assert answer["logs"] == ["called a b"]
    assert answer["toolsUsed"] == ["a:echo", "b:echo"]
    assert answer["created"] is True
    assert re.fullmatch(FQDN, answer["capabilityFqdn"])
    assert answer["capabilityFqdn"].startswith("acme.webapp.a.exec_")
    assert re.fullmatch(r"unnamed_[0-9a-f]{8}", answer["capabilityName"])
    assert answer["routing"] == "local"
    assert isinstance(answer["capabilityId"], str)
    assert answer["executionTimeMs"] > 0
    assert upstreams["a"].calls == [("echo", {"text": "hello"})]
    assert upstreams["b"].calls == [("echo", {"text": "world"})]
    record = await execute.record(answer["capabilityFqdn"])
    assert record.intent == "greet two servers"
    assert record.tools_used == ["a:echo", "b:echo"]
    schema = record.parameters_schema
    assert schema["properties"]["text"]["default"] == "hello"
    assert "word" in schema["required"]
    assert 'text="hello"' not in (record.code or "")  # the literal is a parameter now


async def test_the_same_code_reformatted_is_the_same_capability_and_counts_usage(
    execute: Execute,
) -> None:
    first = await execute(code=TWO_SERVERS, args={"word": "x"})
    reformatted = "# greet\n" + TWO_SERVERS.replace('text="hello"', "text = 'hello' ")
    second = await execute(code=reformatted, args={"word": "y"})
    assert second["created"] is False
    assert second["capabilityFqdn"] == first["capabilityFqdn"]
    assert second["result"] == {"a": "hello", "b": "y"}
    record = await execute.record(first["capabilityFqdn"])
    assert (record.usage_count, record.success_count) == (2, 2)
    assert (await execute.stored())["traces"] == 2


async def test_a_run_is_traced_with_digests_not_values(execute: Execute) -> None:
    from pml.storage.trace_repo import SqlTraceRepository

    answer = await execute(code='return await mcp.a.echo(text="s3cr3t-value")')
    await execute.gateway.executor.flush()
    async with execute.gateway.db.read() as conn:
        rows = await SqlTraceRepository(conn).for_capability(answer["capabilityFqdn"])
    assert len(rows) == 1
    (task,) = rows[0]["task_results"]
    assert task["tool"] == "a:echo"
    assert task["success"] is True
    assert re.fullmatch(r"[0-9a-f]{16}", task["argsDigest"])
    assert "s3cr3t" not in str(rows[0])


async def test_a_name_is_given_to_the_new_capability(execute: Execute) -> None:
    answer = await execute(code="return 1", name="one:value")
    assert answer["capabilityName"] == "one:value"
    record = await execute.record("one:value")
    assert record.tool_name == "mcp__one__value"


async def test_a_taken_name_is_refused_before_running(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    await execute(code="return 1", name="taken")
    before = await execute.stored()
    error = await execute.error(code='return await mcp.a.echo(text="x")', name="taken")
    assert error == {
        "code": "NAME_TAKEN",
        "message": "Capability name 'taken' already exists in scope acme.webapp",
    }
    assert upstreams["a"].calls == []
    assert await execute.stored() == before


@pytest.mark.parametrize("name", ["has space", "x" * 65, "semi;colon", "émoji🙂", ""])
async def test_an_invalid_name_is_refused_and_nothing_runs(
    execute: Execute, name: str, upstreams: dict[str, Upstream]
) -> None:
    error = await execute.error(code='return await mcp.a.echo(text="x")', name=name)
    assert error["code"] in ("INVALID_NAME", "INVALID_INPUT")
    assert upstreams["a"].calls == []
    assert (await execute.stored())["records"] == 0


async def test_update_makes_a_new_version_of_the_named_capability(execute: Execute) -> None:
    first = await execute(code="return 1", name="counter")
    second = await execute(code="return 2", name="counter", update=True)
    assert second["result"] == 2
    assert second["created"] is False
    assert second["capabilityFqdn"] == first["capabilityFqdn"]
    record = await execute.record("counter")
    assert record.version == 2
    old = await execute(capability="counter@v1", intent="old one")
    assert old["result"] == 1
    assert (await execute(capability="counter"))["result"] == 2


async def test_update_of_an_unknown_name_is_not_found_and_nothing_runs(execute: Execute) -> None:
    error = await execute.error(code="return 2", name="nobody", update=True)
    assert error == {"code": "NOT_FOUND", "message": "Capability not found: nobody"}
    assert (await execute.stored())["records"] == 0


async def test_a_tool_error_can_be_caught_by_the_snippet(execute: Execute) -> None:
    code = """
try:
    await mcp.a.fail()
except ToolError as error:
    return {"caught": str(error)}
"""
    answer = await execute(code=code)
    assert answer["result"] == {"caught": "a says no"}


async def test_an_uncaught_tool_error_fails_the_run_and_stores_nothing(execute: Execute) -> None:
    error = await execute.error(code="await mcp.a.fail()\nreturn 1")
    assert error["code"] == "TOOL_ERROR"
    assert "a says no" in error["message"]
    assert await execute.stored() == {"records": 0, "versions": 0, "traces": 0}


async def test_unicode_travels_both_ways(execute: Execute) -> None:
    code = "r = await mcp.a.echo(text=args['t'])\nreturn r['args']['text']"
    answer = await execute(code=code, args={"t": UNICODE_TEXT})
    assert answer["result"] == UNICODE_TEXT


async def test_tool_results_reach_the_snippet_as_structured_content(execute: Execute) -> None:
    answer = await execute(code="m = await mcp.a.mixed()\nreturn m")
    assert answer["result"] == {"n": 1, "nested": {"list": [1, 2.5, None, "x"]}}


async def test_routing_is_inherited_from_the_tools_unless_overridden(execute: Execute) -> None:
    pure = await execute(code="return 6 * 7")
    local = await execute(code='return await mcp.a.echo(text="x")')
    forced = await execute(code='return await mcp.b.echo(text="x")', routing="cloud")
    assert (pure["routing"], local["routing"], forced["routing"]) == ("cloud", "local", "cloud")
    assert (await execute.record(forced["capabilityFqdn"])).routing_override == "cloud"
