"""Every byte a snippet can make the gateway hold is bounded (SPEC §4): results, exception
messages (whatever their size, script or chain), printed output; ``SystemExit`` and other
``BaseException``\\ s fail honestly with ``EXECUTION_FAILED``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pml.errors import ExecutionFailed, LimitExceeded, PmlError, ToolCallError
from pml.sandbox.base import SnippetToolError
from pml.sandbox.monty import MontyEngine
from pml.sandbox.truncate import MAX_ERROR_BYTES
from sandbox.kit import RecordingCaller, limits

pytestmark = pytest.mark.anyio

MB = 1024 * 1024


async def failure(engine: MontyEngine, code: str, **overrides: Any) -> PmlError:
    caller = overrides.pop("caller", RecordingCaller())
    with pytest.raises(PmlError) as caught:
        await engine.run(code, args={}, caller=caller, limits=limits(**overrides))
    return caught.value


def assert_clean_text(text: str, max_bytes: int) -> None:
    """Within the bound, valid UTF-8 (no lone surrogate), valid JSON both ways."""
    data = text.encode("utf-8")  # strict: raises on a lone surrogate
    assert len(data) <= max_bytes
    assert json.loads(json.dumps(text, ensure_ascii=False)) == text


# -- exception messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        'x = 1\nraise ValueError("a" * 50_000_000)',
        'def f():\n    raise RuntimeError("b" * 50_000_000)\nx = 0\nf()',
        'x = 1\nassert x == 2, "c" * 50_000_000',
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
        '    raise KeyError("d" * 50_000_000) from e',
        'msg = "e" * 50_000_000\nraise BaseException(msg)',
    ],
    ids=["raise", "raise-in-function", "assert", "chained", "base-exception"],
)
async def test_a_huge_exception_message_is_cut_with_a_marker(
    engine: MontyEngine, code: str
) -> None:
    error = await failure(engine, code, memory_mb=256)
    assert isinstance(error, ExecutionFailed)
    assert_clean_text(error.message, MAX_ERROR_BYTES)
    assert "… [truncated: " in error.message
    assert error.message.endswith(" more characters] (line 2)") or error.message.endswith(
        " more characters] (line 4)"
    )
    assert error.data["line"] in (2, 4)


async def test_the_marker_counts_the_characters_left_out(engine: MontyEngine) -> None:
    error = await failure(engine, 'raise ValueError("z" * 200_000)', max_result_bytes=1000)
    kept = error.message.count("z")
    assert f"[truncated: {200_000 - kept} more characters]" in error.message
    assert len(error.message.encode()) <= 1000


async def test_an_error_message_never_exceeds_a_small_result_limit(engine: MontyEngine) -> None:
    error = await failure(engine, 'raise ValueError("q" * 5000)', max_result_bytes=60)
    assert len(error.message.encode()) <= 60
    assert error.message.startswith("ValueError: q")


async def test_an_error_under_the_bound_is_whole(engine: MontyEngine) -> None:
    error = await failure(engine, 'x = 1\nraise ValueError("w" * 1000)')
    assert error.message == f"ValueError: {'w' * 1000} (line 2)"


@pytest.mark.parametrize(
    "piece",
    ["é", "😀", "e\u0301", "\u200d👩", "中文", "\\u0000"],
    ids=["latin", "emoji", "combining", "zwj", "cjk", "nul"],
)
async def test_cutting_never_splits_a_character(engine: MontyEngine, piece: str) -> None:
    code = f'raise ValueError("{piece}" * 100_000)'
    error = await failure(engine, code, max_result_bytes=777)
    assert_clean_text(error.message, 777)
    if piece == "e\u0301":  # never a base letter without its accent
        body = error.message.removeprefix("ValueError: ").split("…")[0]
        assert body.endswith("\u0301")


async def test_a_lone_surrogate_in_a_message_gives_clean_text(engine: MontyEngine) -> None:
    error = await failure(engine, 'raise ValueError("\\ud800" * 100_000)', max_result_bytes=500)
    assert len(error.message.encode("utf-8", "surrogatepass")) <= 500
    json.dumps(error.to_dict())  # the error answer is JSON


async def test_a_huge_key_error_from_a_builtin_is_cut_by_the_host(engine: MontyEngine) -> None:
    # Not raised by the snippet's own ``raise``: the message crosses, the host bounds it.
    error = await failure(engine, 'd = {}\nd["k" * 2_000_000]', memory_mb=64)
    assert error.code == "EXECUTION_FAILED"
    assert_clean_text(error.message, MAX_ERROR_BYTES)
    assert error.message.endswith("more characters] (line 2)")


async def test_many_huge_messages_in_a_row_leave_the_engine_working(engine: MontyEngine) -> None:
    for _ in range(5):
        error = await failure(engine, 'raise ValueError("x" * 20_000_000)', memory_mb=128)
        assert len(error.message.encode()) <= MAX_ERROR_BYTES
    outcome = await engine.run("return 40 + 2", args={}, caller=RecordingCaller(), limits=limits())
    assert outcome.value == 42


async def test_a_huge_tool_error_caught_and_raised_again_is_cut(engine: MontyEngine) -> None:
    caller = RecordingCaller({"t.fail": SnippetToolError("t.fail", "boom")})
    code = (
        "try:\n    await mcp.t.fail()\nexcept ToolError as e:\n    raise ValueError(str(e) * 10**6)"
    )
    error = await failure(engine, code, caller=caller)
    assert isinstance(error, ExecutionFailed)
    assert error.message.startswith("ValueError: boomboom")
    assert len(error.message.encode()) <= MAX_ERROR_BYTES


async def test_an_uncaught_tool_error_keeps_its_message(engine: MontyEngine) -> None:
    caller = RecordingCaller({"t.fail": SnippetToolError("t.fail", "no such file")})
    error = await failure(engine, "await mcp.t.fail()", caller=caller)
    assert isinstance(error, ToolCallError)
    assert error.message == "Tool t.fail failed: no such file"


# -- SystemExit and friends ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "exception_type"),
    [
        ("raise SystemExit", "SystemExit"),
        ("raise SystemExit('bye')", "SystemExit"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("raise BaseException('x')", "BaseException"),
        ("raise StopIteration", "StopIteration"),
        ("raise GeneratorExit", "NameError"),  # not a name in the sandbox
        ("raise SystemExit(3)", "RuntimeError"),  # the sandbox takes one string argument
        ("try:\n    raise KeyboardInterrupt\nexcept Exception:\n    pass", "KeyboardInterrupt"),
        (
            "def g():\n    raise SystemExit\ntry:\n    g()\nexcept Exception:\n    pass",
            "SystemExit",
        ),
    ],
)
async def test_base_exceptions_fail_honestly(
    engine: MontyEngine, code: str, exception_type: str
) -> None:
    error = await failure(engine, code)
    assert isinstance(error, ExecutionFailed), error.to_dict()
    assert error.data["exception_type"] == exception_type
    assert error.message.startswith(exception_type)
    outcome = await engine.run("return 'alive'", args={}, caller=RecordingCaller(), limits=limits())
    assert outcome.value == "alive"


# -- results -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "size"),
    [
        ("return 'x' * 98", 100),
        ("return 'é' * 49", 100),  # 2 bytes each
        ('return "\\"" * 49', 100),  # each quote escaped
        ("return [1] * 48 + [12]", 100),  # brackets, 48 ones, 48 commas, 12
        ("return {'k': 'v' * 92}", 100),
        ("return 1, 'x' * 94", 100),  # a tuple is a list
    ],
)
async def test_a_result_of_exactly_the_limit_is_returned(
    engine: MontyEngine, code: str, size: int
) -> None:
    outcome = await engine.run(
        code, args={}, caller=RecordingCaller(), limits=limits(max_result_bytes=size)
    )
    assert (
        len(json.dumps(outcome.value, ensure_ascii=False, separators=(",", ":")).encode()) == size
    )


@pytest.mark.parametrize(
    "code",
    [
        "return 'x' * 99",
        "return 'é' * 50",
        'return "\\"" * 50',
        "return {'k': 'v' * 93}",
        "return 1, 'x' * 95",
        "if True:\n    return 'x' * 10**7",
        "return ['x' * 1000] * 10**4",
        "return {'a': {1, 2}, 'b': 'x' * 10**6}",  # not JSON, and too large: size first
        "return [b'x' * 10**6]",
    ],
)
async def test_a_result_over_the_limit_is_refused(engine: MontyEngine, code: str) -> None:
    error = await failure(engine, code, max_result_bytes=100)
    assert isinstance(error, LimitExceeded), error.to_dict()
    assert error.data == {"limit": "max_result_bytes"}
    assert "exceeds the limit of 100 bytes" in error.message


async def test_a_huge_result_is_refused_inside_the_sandbox(engine: MontyEngine) -> None:
    error = await failure(engine, "return 'x' * (100 * 1024 * 1024)", memory_mb=256)
    assert error.message == (
        f"Result size exceeds the limit of 1000000 bytes (at least {100 * MB + 2} bytes)"
    )


async def test_a_small_non_json_result_is_explained(engine: MontyEngine) -> None:
    error = await failure(engine, "return {'a': {1, 2}}")
    assert error.message == "TypeError: result is not JSON-serialisable: result['a'] is a set"


async def test_returns_inside_functions_are_not_guarded(engine: MontyEngine) -> None:
    code = "def f():\n    return 'x' * 500\ny = f()\nreturn len(y)"
    outcome = await engine.run(
        code, args={}, caller=RecordingCaller(), limits=limits(max_result_bytes=10)
    )
    assert outcome.value == 500


# -- printed output ------------------------------------------------------------------------


async def test_a_flood_of_tiny_prints_is_kept_whole_under_the_limit(engine: MontyEngine) -> None:
    code = "for i in range(20_000):\n    print('x', end='')"
    outcome = await engine.run(
        code, args={}, caller=RecordingCaller(), limits=limits(max_result_bytes=30_000)
    )
    assert outcome.logs == ["x" * 20_000]


async def test_one_huge_print_is_refused(engine: MontyEngine) -> None:
    error = await failure(engine, "print('p' * 50_000_000)\nreturn 1", memory_mb=128)
    assert error.message == "Printed output exceeds the limit of 1000000 bytes"


# -- reserved names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "_pml_result = lambda v: v\nreturn 'x' * 10**7",
        "def _pml_raised(e, line):\n    return e",
        "import json as _pml_json",
        "_pml_error_too_long('ValueError', 'x', 1, 1)",
        "_pml_max_result = 10**9",
        "for _pml_x in range(3):\n    pass",
        "def f(_pml_y):\n    return _pml_y",
        "try:\n    pass\nexcept Exception as _pml_e:\n    pass",
    ],
)
async def test_names_of_the_guards_are_refused(engine: MontyEngine, code: str) -> None:
    error = await failure(engine, code)
    assert isinstance(error, ExecutionFailed)
    assert error.data["exception_type"] == "NameError"
    assert "is reserved" in error.message


async def test_attributes_named_like_guards_are_ordinary(engine: MontyEngine) -> None:
    outcome = await engine.run(
        "d = {'_pml_x': 1}\nreturn d['_pml_x']", args={}, caller=RecordingCaller(), limits=limits()
    )
    assert outcome.value == 1


# -- tool-call arguments --------------------------------------------------------------------


async def test_arguments_over_the_limit_fail_the_run_before_the_call_is_sent(
    engine: MontyEngine,
) -> None:
    caller = RecordingCaller()
    code = "s = 'x' * 3_000_000\nreturn await mcp.fs.write(path='a', content=s)"
    error = await failure(engine, code, caller=caller, max_tool_args_bytes=2 * MB)
    assert isinstance(error, LimitExceeded)
    assert error.data == {"limit": "max_tool_args_bytes"}
    assert error.message.startswith("fs.write(): its arguments are more than 2097152 bytes")
    assert caller.calls == []


async def test_calls_in_flight_together_count_against_the_limit(engine: MontyEngine) -> None:
    caller = RecordingCaller(delay=0.5)
    code = (
        "import asyncio\ns = 'x' * 800_000\n"
        "async def one(i):\n    return await mcp.fs.write(path=str(i), content=s)\n"
        "return await asyncio.gather(*[one(i) for i in range(10)])"
    )
    error = await failure(engine, code, caller=caller, max_tool_args_bytes=2 * MB)
    assert isinstance(error, LimitExceeded)
    assert "the tool calls in flight at once would hold more than 2097152" in error.message
    assert len(caller.calls) == 2  # two fit; the third would not


async def test_the_same_bytes_sent_one_call_after_another_are_fine(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = (
        "s = 'x' * 800_000\nn = 0\nfor i in range(10):\n"
        "    r = await mcp.fs.write(path=str(i), content=s)\n    n += 1\nreturn n"
    )
    outcome = await engine.run(
        code, args={}, caller=caller, limits=limits(max_tool_args_bytes=2 * MB)
    )
    assert outcome.value == 10
    assert len(caller.calls) == 10


async def test_printed_output_counts_as_the_escaped_json_it_is_sent_as(
    engine: MontyEngine,
) -> None:
    # 200 000 NUL characters are 1.2 MB of JSON ("\u0000" each): past a 1 MB limit.
    error = await failure(engine, "print(chr(0) * 200_000)", max_result_bytes=1_000_000)
    assert isinstance(error, LimitExceeded)
    assert error.data == {"limit": "max_result_bytes"}
    outcome = await engine.run(
        "print(chr(0) * 150_000)",
        args={},
        caller=RecordingCaller(),
        limits=limits(max_result_bytes=1_000_000),
    )
    assert len(json.dumps(outcome.logs).encode()) < 1_000_000
