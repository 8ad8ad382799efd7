"""Background embedding: results and errors come back, the work runs one batch at a time on
a thread of lower CPU priority, and the caller's own priority is untouched."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time

import anyio
import anyio.lowlevel
import pytest

from pml.discovery.background import NICE, embed_in_background
from pml.discovery.embedder import HashingEmbedder

pytestmark = pytest.mark.anyio


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_the_result_comes_back() -> None:
    embedder = HashingEmbedder()
    vectors = await embed_in_background(embedder.embed, ["read a file", "list the issues"])
    assert vectors.shape == (2, embedder.dim)
    assert (vectors == embedder.embed(["read a file", "list the issues"])).all()


async def test_an_error_comes_back_as_raised() -> None:
    def broken(texts: list[str]) -> None:
        raise ValueError(f"cannot embed {len(texts)} texts")

    with pytest.raises(ValueError, match="cannot embed 3 texts"):
        await embed_in_background(broken, ["a", "b", "c"])
    assert await embed_in_background(len, ["still", "serving"]) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
async def test_the_work_runs_on_a_thread_of_lower_priority_and_the_caller_keeps_its_own() -> None:
    before = _nice()
    seen = await embed_in_background(lambda: (_nice(), threading.current_thread().name))
    assert seen[0] == min(before + NICE, 19)
    assert seen[1].startswith("pml-background")
    assert _nice() == before


async def test_batches_run_one_at_a_time_in_the_order_given() -> None:
    spans: list[tuple[int, float, float]] = []

    def work(number: int) -> int:
        start = time.perf_counter()
        time.sleep(0.02)
        spans.append((number, start, time.perf_counter()))
        return number

    results: list[int] = []

    async def submit(number: int) -> None:
        results.append(await embed_in_background(work, number))

    async with anyio.create_task_group() as group:
        for number in range(5):
            group.start_soon(submit, number)
            await anyio.lowlevel.checkpoint()  # submitted in this order
    assert sorted(results) == list(range(5))
    assert [number for number, _, _ in spans] == list(range(5))
    for (_, _, ended), (_, started, _) in itertools.pairwise(spans):
        assert started >= ended  # never two at once
