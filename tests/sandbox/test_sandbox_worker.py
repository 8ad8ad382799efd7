"""The sandbox's worker processes hold none of the gateway's environment.

pydantic-monty starts its workers with an empty environment; this guards that property
(database URLs, API keys and upstream tokens live in the gateway's environment).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from e2e.support import process_tree
from pml.sandbox.monty import MontyEngine
from sandbox.kit import RecordingCaller, limits

pytestmark = pytest.mark.anyio

SECRET = "pml-test-secret-5f2c9a"


def _worker_environments() -> list[dict[str, str]]:
    """The environments of this process's ``monty`` worker processes (via ``/proc``)."""
    found: list[dict[str, str]] = []
    for pid, argv in process_tree(os.getpid()).items():
        if not any("monty" in part for part in argv):
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        pairs = (item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
        found.append({k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs})
    return found


async def test_workers_start_with_an_empty_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PML_TEST_SECRET", SECRET)
    engine = MontyEngine(min_workers=1, max_workers=1)
    try:
        outcome = await engine.run("return 1", args={}, caller=RecordingCaller(), limits=limits())
        environments = _worker_environments()
    finally:
        await engine.aclose()
    assert outcome.value == 1
    assert environments, "no monty worker found among this process's children"
    for environment in environments:
        assert SECRET not in environment.values()
        assert "PML_TEST_SECRET" not in environment
        assert not set(environment) & {"HOME", "USER", "PML_CONFIG", "DATABASE_URL"}
