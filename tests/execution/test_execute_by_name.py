"""``pml_execute`` by name, capabilities calling capabilities, and suggestion mode."""

from __future__ import annotations

import pytest

from execution.conftest import SCOPE, Execute
from gateway.upstreams import Upstream
from pml.registry.service import RenameChanges

pytestmark = pytest.mark.anyio

READ = 'r = await mcp.a.echo(text="a.json")\nreturn r["args"]["text"]'


async def test_a_call_by_name_with_new_args_generalises_the_run(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    created = await execute(code=READ, name="fs:read_json", intent="read a.json")
    again = await execute(capability="fs:read_json")
    other = await execute(capability="fs:read_json", args={"text": "b.json"})
    assert created["result"] == again["result"] == "a.json"
    assert other["result"] == "b.json"
    assert other["created"] is False
    assert other["capabilityFqdn"] == created["capabilityFqdn"]
    assert upstreams["a"].calls[-1] == ("echo", {"text": "b.json"})
    record = await execute.record("fs:read_json")
    assert (record.usage_count, record.success_count) == (3, 3)


async def test_every_spelling_of_a_name_resolves(execute: Execute) -> None:
    created = await execute(code=READ, name="fs:read_json")
    fqdn = created["capabilityFqdn"]
    for ref in (
        "fs:read_json",
        fqdn,
        "mcp__fs__read_json",
        "fs:read_json@v1",
        "fs:read_json@latest",
    ):
        answer = await execute(capability=ref)
        assert answer["capabilityFqdn"] == fqdn, ref


async def test_an_old_name_works_with_a_deprecation_warning(execute: Execute) -> None:
    await execute(code=READ, name="old_name")
    await execute.gateway.registry.rename(SCOPE, "old_name", RenameChanges(new_name="new_name"))
    answer = await execute(capability="old_name")
    assert answer["capabilityName"] == "new_name"
    assert answer["deprecatedAlias"]["alias"] == "old_name"


async def test_an_unknown_capability_has_the_exact_message(execute: Execute) -> None:
    error = await execute.error(capability="nope:missing")
    assert error == {"code": "NOT_FOUND", "message": "Capability not found: nope:missing"}


async def test_a_bad_version_is_version_not_found(execute: Execute) -> None:
    await execute(code=READ, name="my-reader")
    error = await execute.error(capability="my-reader@v5")
    assert error["code"] == "VERSION_NOT_FOUND"
    assert error["message"] == "Version v5 not found for my-reader"


async def test_args_that_fail_the_schema_are_invalid_args_and_nothing_runs(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    await execute(
        code='return await mcp.a.echo(text=args["word"])', name="needs_word", args={"word": "w"}
    )
    calls = len(upstreams["a"].calls)
    missing = await execute.error(capability="needs_word")
    assert missing["code"] == "INVALID_ARGS"
    assert "word" in missing["message"]
    assert len(upstreams["a"].calls) == calls
    record = await execute.record("needs_word")
    assert (record.usage_count, record.success_count) == (2, 1)  # the failure is counted


async def test_an_mcp_server_record_is_not_runnable(execute: Execute) -> None:
    error = await execute.error(capability="mcp:filesystem")
    assert error["code"] == "INVALID_INPUT"


async def test_a_capability_calls_a_capability_sharing_tools_and_routing(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    inner = await execute(code=READ, name="fs:read_json")
    outer_code = (
        'got = await mcp.fs.read_json(text="c.json")\n'
        "b = await mcp.b.echo(text=got)\n"
        'return b["args"]'
    )
    outer = await execute(code=outer_code, name="fs:read_twice")
    assert outer["result"] == {"text": "c.json"}
    assert outer["toolsUsed"] == [inner["capabilityFqdn"], "a:echo", "b:echo"]
    record = await execute.record("fs:read_twice")
    assert f'mcp["{inner["capabilityFqdn"]}"]' in (record.code or "")  # stored by FQDN
    assert record.routing == "local"
    # Renaming the inner capability never breaks the outer one.
    await execute.gateway.registry.rename(SCOPE, "fs:read_json", RenameChanges(new_name="fs:load"))
    again = await execute(capability="fs:read_twice", args={"text": "d.json"})
    assert again["result"] == {"text": "d.json"}


async def test_a_failing_inner_capability_is_a_tool_error_for_the_outer_snippet(
    execute: Execute,
) -> None:
    await execute(code="x = args.get('n', 1)\nreturn 10 / x", name="math:divide")
    code = """
try:
    return await mcp.math.divide(n=0)
except ToolError as error:
    return "caught: " + str(error)
"""
    answer = await execute(code=code)
    assert answer["result"].startswith("caught: ")
    assert "ZeroDivisionError" in answer["result"]


async def test_suggestions_rank_tools_and_capabilities_for_the_intent(execute: Execute) -> None:
    await execute(code=READ, name="fs:read_json", intent="read a json file")
    answer = await execute(intent="read json")
    assert answer["status"] == "suggestions"
    suggestions = answer["suggestions"]
    assert suggestions[0]["kind"] == "capability"
    assert suggestions[0]["callName"] == "mcp.fs.read_json"
    assert "await mcp.fs.read_json(" in suggestions[0]["template"]
    echo = await execute(intent="echo the arguments")
    assert echo["suggestions"][0]["callName"] in ("mcp.a.echo", "mcp.b.echo")
    assert (await execute(intent="zzzz qqqq"))["suggestions"] == []
