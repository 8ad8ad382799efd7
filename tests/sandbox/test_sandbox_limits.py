"""Each ``SandboxSettings`` limit stops a run with the error that names it (SPEC §4)."""

from __future__ import annotations

import anyio
import pytest

from pml.errors import (
    CodeTooLarge,
    ExecutionTimeout,
    LimitExceeded,
)
from pml.sandbox.monty import MontyEngine
from sandbox.kit import RecordingCaller, limits

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "n = 0\nwhile True:\n    try:\n        while True:\n            n += 1\n"
        "    except BaseException:\n        pass",
        "import time\ntime.sleep(30)",
        "import asyncio\nawait asyncio.sleep(30)",
    ],
    ids=["loop", "loop-catching-everything", "sleep", "async-sleep"],
)
async def test_wall_time(engine: MontyEngine, code: str) -> None:
    started = anyio.current_time()
    with pytest.raises(ExecutionTimeout) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(wall_time_s=0.5))
    assert anyio.current_time() - started < 3
    assert caught.value.message == "Execution exceeded the time limit of 0.5 s"
    assert caught.value.data == {"limit": "wall_time_s"}


async def test_wall_time_counts_time_spent_in_tool_calls(engine: MontyEngine) -> None:
    caller = RecordingCaller(delay=0.2)
    code = "while True:\n    await mcp.slow.call()"
    with pytest.raises(ExecutionTimeout):
        await engine.run(code, args={}, caller=caller, limits=limits(wall_time_s=0.7))
    assert 2 <= len(caller.calls) <= 5


async def test_the_engine_still_works_after_a_timeout(engine: MontyEngine) -> None:
    with pytest.raises(ExecutionTimeout):
        await engine.run(
            "while True:\n    pass",
            args={},
            caller=RecordingCaller(),
            limits=limits(wall_time_s=0.3),
        )
    outcome = await engine.run("return 7", args={}, caller=RecordingCaller(), limits=limits())
    assert outcome.value == 7


@pytest.mark.parametrize(
    "code",
    [
        'x = "a" * 10**9',
        "x = []\nwhile True:\n    x.append('abcdefgh' * 100)",
        "try:\n    x = 'a' * 10**9\nexcept MemoryError:\n    pass\nreturn 'survived'",
    ],
    ids=["string", "list-growth", "catching-memory-error"],
)
async def test_memory(engine: MontyEngine, code: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(memory_mb=16))
    assert caught.value.message == "Execution exceeded the memory limit of 16 MB"
    assert caught.value.data == {"limit": "memory_mb"}


async def test_tool_calls_up_to_the_limit_are_fine(engine: MontyEngine) -> None:
    caller = RecordingCaller()
    code = "for i in range(3):\n    await mcp.t.call(i=i)\nreturn 'ok'"
    outcome = await engine.run(code, args={}, caller=caller, limits=limits(max_tool_calls=3))
    assert (outcome.value, outcome.tool_calls, len(caller.calls)) == ("ok", 3, 3)


@pytest.mark.parametrize(
    "code",
    [
        "for i in range(10):\n    await mcp.t.call(i=i)",
        "for i in range(10):\n    try:\n        await mcp.t.call(i=i)\n"
        "    except BaseException:\n        pass",
        "import asyncio\nawait asyncio.gather(*[mcp.t.call(i=i) for i in range(10)])",
    ],
    ids=["sequential", "catching", "gathered"],
)
async def test_the_call_past_max_tool_calls_is_refused(engine: MontyEngine, code: str) -> None:
    caller = RecordingCaller()
    with pytest.raises(LimitExceeded) as caught:
        await engine.run(code, args={}, caller=caller, limits=limits(max_tool_calls=3))
    assert caught.value.message == "Execution exceeded the limit of 3 tool calls"
    assert caught.value.data == {"limit": "max_tool_calls"}
    assert len(caller.calls) == 3


async def test_result_size(engine: MontyEngine) -> None:
    small = limits(max_result_bytes=100)
    ok = await engine.run("return 'x' * 98", args={}, caller=RecordingCaller(), limits=small)
    assert ok.value == "x" * 98  # 100 bytes of JSON with the quotes
    with pytest.raises(LimitExceeded) as caught:
        await engine.run("return 'x' * 99", args={}, caller=RecordingCaller(), limits=small)
    assert caught.value.message == "Result size 101 bytes exceeds the limit of 100 bytes"
    assert caught.value.data == {"limit": "max_result_bytes"}


async def test_printed_output_is_bounded(engine: MontyEngine) -> None:
    started = anyio.current_time()
    with pytest.raises(LimitExceeded) as caught:
        await engine.run(
            "while True:\n    print('x' * 100)",
            args={},
            caller=RecordingCaller(),
            limits=limits(max_result_bytes=10_000, wall_time_s=10),
        )
    assert anyio.current_time() - started < 3  # stopped by the output cap, not the wall time
    assert caught.value.message == "Printed output exceeds the limit of 10000 bytes"
    assert caught.value.data == {"limit": "max_result_bytes"}


async def test_printing_under_the_cap_is_kept(engine: MontyEngine) -> None:
    outcome = await engine.run(
        "for i in range(50):\n    print(i)",
        args={},
        caller=RecordingCaller(),
        limits=limits(max_result_bytes=10_000),
    )
    assert outcome.logs == [str(i) for i in range(50)]


@pytest.mark.parametrize(
    "code",
    [
        "def f(n):\n    return f(n + 1)\nf(0)",
        "def a():\n    return b()\ndef b():\n    return a()\na()",
    ],
)
async def test_deep_recursion(engine: MontyEngine, code: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits())
    assert caught.value.message == "Execution exceeded the maximum recursion depth of 1000"
    assert caught.value.data == {"limit": "recursion_depth"}


async def test_code_size_counts_utf8_bytes(engine: MontyEngine) -> None:
    code = "return 'ééééé'"  # 14 characters, 19 bytes
    ok = await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(max_code_bytes=19))
    assert ok.value == "ééééé"
    with pytest.raises(CodeTooLarge) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(max_code_bytes=18))
    assert caught.value.message == "Code size exceeds maximum: 19 bytes (max: 18)"
    assert caught.value.code == "CODE_TOO_LARGE"


async def test_undefined_name_lookups_are_bounded(engine: MontyEngine) -> None:
    # Each lookup of an undefined name is a host round trip in pydantic-monty.
    code = "for i in range(100000):\n    try:\n        nope\n    except NameError:\n        pass"
    with pytest.raises(LimitExceeded) as caught:
        await engine.run(code, args={}, caller=RecordingCaller(), limits=limits(wall_time_s=20))
    assert caught.value.data == {"limit": "host_round_trips"}
