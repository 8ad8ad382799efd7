"""A long-running gateway hands the memory it freed back to the system (``pml.freed_memory``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import anyio
import pytest

from pml import freed_memory
from pml.freed_memory import release_periodically

pytestmark = pytest.mark.anyio

# Blocks of 16 KB (glibc's, not Python's small-object allocator) every other one freed: the
# holes stay resident until the heap is trimmed.
_FRAGMENTED = textwrap.dedent(
    """
    import anyio, json
    from pml.freed_memory import release_periodically

    def rss_kb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    blocks = [bytes(16_384) for _ in range(8_000)]
    del blocks[::2]
    before = rss_kb()

    async def main():
        with anyio.move_on_after(0.5):
            await release_periodically(0.05)

    anyio.run(main)
    print(json.dumps({"before": before, "after": rss_kb(), "kept": len(blocks)}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_is_released_while_the_process_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True, check=True, timeout=60
    )
    figures = json.loads(out.stdout)
    assert figures["kept"] == 4_000
    # ~64 MB freed in holes between live blocks: most of it goes back (pages whole)
    assert figures["before"] - figures["after"] > 20_000, figures


async def test_release_runs_every_interval_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[int] = []
    monkeypatch.setattr(
        freed_memory, "release_freed_memory", lambda: threads.append(threading.get_ident())
    )
    with anyio.move_on_after(0.35):
        await release_periodically(0.05)
    assert len(threads) >= 3
    assert threading.get_ident() not in threads  # never on the event loop's thread
