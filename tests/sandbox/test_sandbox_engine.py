"""The snippet contract of ``MontyEngine`` (SPEC §4): values, ``args``, logs, ``mcp``, errors."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from pml.errors import (
    CodeSyntaxError,
    ExecutionFailed,
    InternalError,
    PmlError,
    PolicyDenied,
    ToolCallError,
    UnknownTool,
    UpstreamUnavailable,
)
from pml.sandbox.base import SnippetToolError, ToolRef
from pml.sandbox.monty import MontyEngine
from sandbox.kit import RecordingCaller, limits

pytestmark = pytest.mark.anyio


async def run(engine: MontyEngine, code: str, caller: RecordingCaller | None = None, **args: Any):
    return await engine.run(code, args=args, caller=caller or RecordingCaller(), limits=limits())


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**62, 2.5, "", "héllo ✓", [], [1, "a", None], {"a": {"b": [1.5]}}],
)
async def test_the_returned_json_value_is_the_result(engine: MontyEngine, value: Any) -> None:
    outcome = await run(engine, f"return {value!r}")
    assert outcome.value == value
    assert type(outcome.value) is type(value)


async def test_tuples_come_back_as_lists(engine: MontyEngine) -> None:
    assert (await run(engine, "return (1, (2, 3))")).value == [1, [2, 3]]


@pytest.mark.parametrize("code", ["x = 1\nx", "x = 1", "if True:\n    5", "pass"])
async def test_no_return_means_none(engine: MontyEngine, code: str) -> None:
    assert (await run(engine, code)).value is None


async def test_return_inside_blocks_ends_the_snippet(engine: MontyEngine) -> None:
    code = "for i in range(10):\n    if i == 3:\n        return i\nreturn -1"
    assert (await run(engine, code)).value == 3


async def test_top_level_await_and_async_functions(engine: MontyEngine) -> None:
    code = "async def double(x):\n    return 2 * x\nreturn await double(21)"
    assert (await run(engine, code)).value == 42


async def test_args_are_the_call_arguments(engine: MontyEngine) -> None:
    outcome = await run(engine, "return [args['path'], args.get('n', 0) + 1]", path="/x", n=2)
    assert outcome.value == ["/x", 3]


async def test_everyday_python_works(engine: MontyEngine) -> None:
    code = """\
import json
import re
from dataclasses import dataclass

@dataclass
class Point:
    x: int
    y: int

points = [Point(i, i * i) for i in range(4)]
total = sum(p.y for p in points if p.x % 2 == 0)
try:
    json.loads("{bad")
    parsed = "no"
except ValueError:
    parsed = "failed"
return {"total": total, "digits": re.findall(r"\\d+", "a1b22"), "parsed": parsed,
        "fmt": f"{total:04d}", "data": json.loads('{"k": [1, 2]}')}
"""
    outcome = await run(engine, code)
    assert outcome.value == {
        "total": 4,
        "digits": ["1", "22"],
        "parsed": "failed",
        "fmt": "0004",
        "data": {"k": [1, 2]},
    }


async def test_print_goes_to_logs_not_to_the_host(
    engine: MontyEngine, capfd: pytest.CaptureFixture[str]
) -> None:
    code = "print('hello', 42)\nprint('a\\nb')\nprint('no newline', end='')\nreturn 1"
    outcome = await run(engine, code)
    assert outcome.logs == ["hello 42", "a", "b", "no newline"]
    captured = capfd.readouterr()
    assert "hello" not in captured.out + captured.err


async def test_mcp_attribute_form_reaches_the_caller(engine: MontyEngine) -> None:
    caller = RecordingCaller({"filesystem.read_file": "contents"})
    code = "return await mcp.filesystem.read_file(path=args['p'], limit=3)"
    outcome = await run(engine, code, caller, p="/etc/x")
    assert outcome.value == "contents"
    assert caller.calls == [(ToolRef("filesystem", "read_file"), {"path": "/etc/x", "limit": 3})]
    assert outcome.tool_calls == 1


async def test_mcp_subscript_forms_reach_the_caller(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = """\
a = await mcp.math["get-sum"](a=1, b=2)
b = await mcp["org.p.ns.act.ab12"](q="x")
name = "dyn" + "amic"
c = await mcp.math[name]()
return [a, b, c]
"""
    outcome = await run(engine, code, caller)
    assert caller.calls == [
        (ToolRef("math", "get-sum"), {"a": 1, "b": 2}),
        (ToolRef("", "org.p.ns.act.ab12"), {"q": "x"}),
        (ToolRef("math", "dynamic"), {}),
    ]
    assert outcome.value[1] == {"tool": "org.p.ns.act.ab12", "arguments": {"q": "x"}}


async def test_mcp_namespaces_and_tools_can_be_held_in_variables(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = "fs = mcp.fs\nread = fs.read\nm = mcp\nawait read(p=1)\nawait m.git.log(n=2)"
    await run(engine, code, caller)
    assert caller.calls == [(ToolRef("fs", "read"), {"p": 1}), (ToolRef("git", "log"), {"n": 2})]


async def test_a_name_only_known_at_run_time_needs_a_subscript(engine: MontyEngine) -> None:
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, "ns = 'f' + 's'\nawait getattr(mcp, ns).read()")
    assert caught.value.data["exception_type"] == "AttributeError"


async def test_gather_runs_tool_calls_concurrently(engine: MontyEngine) -> None:
    caller = RecordingCaller(delay=0.2)
    code = (
        "import asyncio\n"
        "return await asyncio.gather(mcp.a.one(i=1), mcp.a.two(i=2), mcp.b.three(i=3))"
    )
    started = anyio.current_time()
    outcome = await run(engine, code, caller)
    assert anyio.current_time() - started < 0.5  # three 0.2 s calls overlapped
    assert [item["tool"] for item in outcome.value] == ["a.one", "a.two", "b.three"]
    assert sorted(caller.refs) == ["a.one", "a.two", "b.three"]
    assert outcome.tool_calls == 3


async def test_the_value_a_tool_returns_is_what_the_snippet_sees(engine: MontyEngine) -> None:
    answer = {"rows": [{"id": 1, "ok": True, "score": 0.5, "tags": None}]}
    caller = RecordingCaller({"db.query": answer})
    code = "r = await mcp.db.query(sql='x')\nreturn [r['rows'][0]['id'] + 1, r]"
    assert (await run(engine, code, caller)).value == [2, answer]


async def test_a_caught_tool_error_is_a_normal_exception(engine: MontyEngine) -> None:
    caller = RecordingCaller({"fs.read": SnippetToolError("fs.read", "no such file: /x")})
    code = """\
try:
    await mcp.fs.read(path="/x")
except ToolError as e:
    return "caught: " + str(e)
"""
    assert (await run(engine, code, caller)).value == "caught: no such file: /x"


async def test_except_tool_error_does_not_catch_other_errors(engine: MontyEngine) -> None:
    code = "try:\n    1/0\nexcept ToolError:\n    return 'wrong'"
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, code)
    assert caught.value.data["exception_type"] == "ZeroDivisionError"


async def test_an_uncaught_tool_error_fails_the_run_with_tool_error(engine: MontyEngine) -> None:
    caller = RecordingCaller({"fs.read": SnippetToolError("fs.read", "permission denied")})
    with pytest.raises(ToolCallError) as caught:
        await run(engine, "x = 1\nawait mcp.fs.read(path='/x')\nreturn 2", caller)
    assert caught.value.message == "Tool fs.read failed: permission denied"
    assert caught.value.data["tool"] == "fs.read"
    assert caught.value.code == "TOOL_ERROR"


@pytest.mark.parametrize(
    "handler",
    ["except:\n    pass", "except Exception:\n    pass", "except BaseException:\n    pass"],
)
@pytest.mark.parametrize(
    "error",
    [PolicyDenied("Denied by policy: fs.write"), UnknownTool("Unknown tool: fs.nope")],
    ids=["policy", "unknown"],
)
async def test_a_pml_error_from_the_caller_ends_the_run_even_if_caught(
    engine: MontyEngine, handler: str, error: PmlError
) -> None:
    caller = RecordingCaller({"fs.write": error})
    code = f"try:\n    await mcp.fs.write(path='/x')\n{handler}\nawait mcp.fs.read()\nreturn 1"
    with pytest.raises(PmlError) as caught:
        await run(engine, code, caller)
    assert caught.value is error
    assert caller.refs == ["fs.write"]  # nothing ran after the denial


async def test_a_pml_error_ends_a_snippet_that_loops_after_catching_it(
    engine: MontyEngine,
) -> None:
    error = UpstreamUnavailable("Upstream fs is not available")
    caller = RecordingCaller({"fs.read": error})
    code = "try:\n    await mcp.fs.read()\nexcept:\n    pass\nwhile True:\n    pass"
    started = anyio.current_time()
    with pytest.raises(UpstreamUnavailable):
        await run(engine, code, caller)
    assert anyio.current_time() - started < 2  # not the 5 s wall time


async def test_a_bug_in_the_caller_is_an_internal_error(engine: MontyEngine) -> None:
    caller = RecordingCaller({"fs.read": KeyError("oops")})
    with pytest.raises(InternalError):
        await run(engine, "try:\n    await mcp.fs.read()\nexcept:\n    pass", caller)


async def test_positional_tool_arguments_fail_the_run(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, "x = 1\nawait mcp.fs.read('/etc/passwd')", caller)
    assert "keyword arguments only" in caught.value.message
    assert caught.value.data == {"exception_type": "TypeError", "line": 2}
    assert caller.calls == []


@pytest.mark.parametrize(
    "value", ["{1, 2}", "b'raw'", "float('nan')", "{1: 'a'}", "[float('inf')]"]
)
async def test_non_json_tool_arguments_fail_before_the_call(
    engine: MontyEngine, value: str
) -> None:
    caller = RecordingCaller()
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, f"await mcp.fs.write(data={value})", caller)
    assert "not JSON-serialisable" in caught.value.message
    assert caught.value.data["exception_type"] == "TypeError"
    assert caller.calls == []


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("return {1, 2}", "result is a set"),
        ("return b'raw'", "result is bytes"),
        ("return float('nan')", "result is a non-finite float (nan)"),
        ("return {'a': [1, float('inf')]}", "result['a'][1] is a non-finite float (inf)"),
        ("class P:\n    pass\nreturn P()", "result is an instance of class P"),
        ("return {1: 'a'}", "result has a key that is not a string"),
        ("return 10 ** 5000", "result is an integer too large for JSON"),
        ("x = []\nfor i in range(1000):\n    x = [x]\nreturn x", "nested more than"),
    ],
)
async def test_a_result_that_is_not_json_fails(engine: MontyEngine, code: str, shown: str) -> None:
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, code)
    assert caught.value.message.startswith("TypeError: result is not JSON-serialisable: ")
    assert shown in caught.value.message
    assert caught.value.data["exception_type"] == "TypeError"


async def test_syntax_errors_carry_the_snippet_position(engine: MontyEngine) -> None:
    with pytest.raises(CodeSyntaxError) as caught:
        await run(engine, "x = 1\ny = (2 +\n")
    assert caught.value.data["line"] == 2
    assert "line 2, column" in caught.value.message


async def test_syntax_the_sandbox_cannot_run_is_a_syntax_error_at_its_line(
    engine: MontyEngine,
) -> None:
    code = "data = await mcp.fs.read()\nclass Mine(dict):\n    pass"
    with pytest.raises(CodeSyntaxError) as caught:
        await run(engine, code)
    assert caught.value.data == {"line": 2, "column": 1}
    assert caught.value.message.startswith("Syntax error at line 2, column 1: ")


@pytest.mark.parametrize("with_mcp", [False, True])
async def test_exceptions_name_type_message_and_snippet_line(
    engine: MontyEngine, with_mcp: bool
) -> None:
    first = "data = await mcp.fs.read()" if with_mcp else "data = 1"
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, f"{first}\ny = 2\nz = y / 0\nreturn z")
    assert caught.value.message == "ZeroDivisionError: division by zero (line 3)"
    assert caught.value.data == {"exception_type": "ZeroDivisionError", "line": 3}


async def test_an_exception_in_a_function_names_the_innermost_line(engine: MontyEngine) -> None:
    code = "await mcp.fs.read()\ndef f(d):\n    return d['missing']\n\nf({})"
    with pytest.raises(ExecutionFailed) as caught:
        await run(engine, code)
    assert caught.value.data == {"exception_type": "KeyError", "line": 3}


async def test_two_runs_at_once_do_not_see_each_other(engine: MontyEngine) -> None:
    code = """\
print("start", args["who"])
seen = []
for i in range(3):
    r = await mcp.echo.echo(who=args["who"], i=i)
    seen.append(r["arguments"]["who"])
print("end", args["who"])
return seen
"""
    callers = {who: RecordingCaller(delay=0.05) for who in ("alice", "bob")}
    outcomes: dict[str, Any] = {}

    async def one(who: str) -> None:
        outcomes[who] = await engine.run(
            code, args={"who": who}, caller=callers[who], limits=limits()
        )

    async with anyio.create_task_group() as group:
        for who in callers:
            group.start_soon(one, who)
    for who, caller in callers.items():
        assert outcomes[who].value == [who, who, who]
        assert outcomes[who].logs == [f"start {who}", f"end {who}"]
        assert outcomes[who].tool_calls == 3
        assert [arguments["who"] for _, arguments in caller.calls] == [who] * 3


async def test_nothing_survives_from_one_run_to_the_next() -> None:
    async with MontyEngine(max_workers=1) as engine:  # one worker: same process each time
        first = "counter = 41\nclass Kept:\n    pass\ndef helper():\n    return 1\nreturn counter"
        assert (await run(engine, first)).value == 41
        for name in ("counter", "Kept", "helper"):
            with pytest.raises(ExecutionFailed) as caught:
                await run(engine, f"return {name}")
            assert caught.value.data["exception_type"] == "NameError"


async def test_the_outcome_counts_tool_calls_and_time(engine: MontyEngine) -> None:
    outcome = await run(engine, "for i in range(4):\n    await mcp.x.y(i=i)")
    assert outcome.tool_calls == 4
    assert outcome.duration_ms > 0


async def test_tool_calls_in_flight_are_cancelled_when_the_run_ends(engine: MontyEngine) -> None:
    caller = RecordingCaller(delay=10)
    code = "import asyncio\nasyncio.gather(mcp.a.b(), mcp.a.c())\nawait mcp.a.d()"
    with pytest.raises(PmlError) as caught:
        await engine.run(code, args={}, caller=caller, limits=limits(wall_time_s=0.5))
    assert caught.value.code == "TIMEOUT"
    assert caller.calls  # it did call
    assert sorted(map(str, caller.cancelled)) == sorted(caller.refs)
    assert len(caller.calls) == 3, caller.refs


async def test_aclose_is_idempotent_and_final() -> None:
    engine = MontyEngine()
    assert (await run(engine, "return 1")).value == 1
    await engine.aclose()
    await engine.aclose()
    with pytest.raises(InternalError):
        await run(engine, "return 1")
