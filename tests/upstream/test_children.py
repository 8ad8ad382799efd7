"""The last-resort stop reaches children that run in sessions of their own."""

from __future__ import annotations

import subprocess
import sys
import time

from pml.upstream.children import child_pids, terminate_children


def test_terminate_children_signals_a_child_in_its_own_session() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        assert child.pid in child_pids()
        assert child.pid in terminate_children()
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child.returncode is not None
        assert child.returncode < 0  # ended by the signal
    finally:
        child.kill()
        child.wait(timeout=10)
