"""A large snippet is analysed off the event loop, by the checking process, one at a time:
other tenants' requests keep being served meanwhile, and the answer is the same as
analysing it in place."""

from __future__ import annotations

import os
import time

import anyio
import pytest

from pml import cpu_process
from pml.analysis.snippet import SnippetAnalysis, analyze_snippet
from pml.errors import CodeSyntaxError, CodeTooLarge
from pml.execution.answers import analysis_of
from pml.sandbox import study
from pml.sandbox.program import build_program, cached_program

pytestmark = pytest.mark.anyio


def heavy(seed: int) -> str:
    """~70 KB of f-strings: hundreds of milliseconds of analysis."""
    lines = [f'a{i} = f"v{{x}} {i} {seed} {{y}}"' for i in range(2500)]
    return "x = y = 1\n" + "\n".join(lines) + "\nreturn a1"


async def test_the_event_loop_keeps_turning_while_a_large_snippet_is_analysed() -> None:
    code = heavy(1)
    assert len(code) > study.INLINE_BYTES
    ticks = 0

    async def ticker(done: anyio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.sleep(0.001)

    async def analysed(done: anyio.Event) -> SnippetAnalysis:
        try:
            return await analysis_of(code, 100_000)
        finally:
            done.set()

    done = anyio.Event()
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        group.start_soon(ticker, done)
        analysis = await analysed(done)
        took_s = time.perf_counter() - started
        assert analysis.code_hash == analyze_snippet(code).code_hash
        # In place, the loop would not have turned once while the analysis ran (took_s).
        assert ticks >= 10, (ticks, took_s)
        assert await analysis_of(code, 100_000) is analysis  # cached: no second analysis


async def test_large_analyses_run_one_at_a_time_and_each_gets_its_own_answer() -> None:
    codes = [heavy(seed) for seed in range(2, 5)]
    results: dict[int, str] = {}

    async def analyse(index: int) -> None:
        results[index] = (await analysis_of(codes[index], 100_000)).code_hash

    async with anyio.create_task_group() as group:
        for index in range(len(codes)):
            group.start_soon(analyse, index)
    assert results == {i: analyze_snippet(code).code_hash for i, code in enumerate(codes)}
    lane = cpu_process.cpu_lane()
    assert (lane.slots, lane.running, lane.waiting, lane.tracked) == (1, 0, 0, 0)
    assert cpu_process.PROCESS.pid not in (None, os.getpid())  # checked in the child process
    for code in codes:  # each program was built with its analysis: the run will not wait
        assert cached_program(code) == build_program(code)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("x = (" * 2000 + "1" + ")" * 2000 + "\n" + "#" * 5000, CodeSyntaxError),
        ("def f(:\n" + "# pad\n" * 2000, CodeSyntaxError),
        ("x = 1\n" * 30_000, CodeTooLarge),
        ("s = '\udcff'\n" + "# é\n" * 3000, CodeSyntaxError),
    ],
)
async def test_a_large_hostile_snippet_fails_the_same_off_the_loop(
    code: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await analysis_of(code, 100_000)
