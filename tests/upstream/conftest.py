"""Fixtures of the upstream pool's tests (helpers live in ``upstream.helpers``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from upstream.helpers import TOY_SERVER, free_port


@pytest.fixture
def http_toy() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The toy server over streamable HTTP (requires ``X-Token: s3cret``): its URL and process."""
    port = free_port()
    command = [sys.executable, str(TOY_SERVER), "--http", str(port), "--header", "X-Token=s3cret"]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait()
