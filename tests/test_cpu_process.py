"""The gateway's heavy pure-Python work (checking large snippets, diffing versions) is done
by a child process (``pml.cpu_process``): the same answers as in place, bounded in CPU and
time, tenants in turn, and a child that dies or cannot start never takes an answer with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import anyio
import pytest

from pml import cpu_process
from pml.analysis.snippet import analyze_snippet
from pml.errors import Busy, CodeSyntaxError, ExecutionFailed, LimitExceeded, PmlError
from pml.registry.versions import unified_diff
from pml.sandbox import study
from pml.sandbox.program import build_program, cached_program

pytestmark = pytest.mark.anyio


def heavy(lines: int, seed: int = 0) -> str:
    """f-strings cost the analysis most: ~0.3 ms of CPU a line."""
    body = "\n".join(f'a{i} = f"v{{x}} {i} {seed} {{y}}"' for i in range(lines))
    return f"x = y = 1\n{body}\nreturn a1"


def large(seed: int) -> str:
    """~8 KB: over the size checked in place, and quick to check."""
    return "\n".join(f"v{seed}_{i} = {i}" for i in range(600)) + "\nreturn 1"


def in_place(code: str) -> tuple[Any, Any]:
    """What checking ``code`` here gives: each value or the ``PmlError`` raised."""
    outcomes: list[Any] = []
    for build in (lambda: analyze_snippet(code, max_code_bytes=10**7), lambda: build_program(code)):
        try:
            outcomes.append(build())
        except PmlError as error:
            outcomes.append(error)
    return outcomes[0], outcomes[1]


def same(left: Any, right: Any) -> bool:
    if isinstance(left, PmlError):
        return type(left) is type(right) and left.to_dict() == right.to_dict()
    return left == right


@pytest.fixture
def process() -> Any:
    child = cpu_process.CpuProcess()
    yield child
    child.close()


HOSTILE = [
    pytest.param(large(1), id="plain"),
    pytest.param("x = (" * 300 + "1" + ")" * 300 + "\n" + "# pad\n" * 1000, id="nested"),
    pytest.param("def f(:\n" + "# pad\n" * 1000, id="syntax-error"),
    pytest.param("s = '\udcff'\n" + "# é\n" * 2000, id="lone-surrogate"),
    pytest.param("x = 1\x00\n" + "# pad\n" * 1000, id="nul-byte"),
    pytest.param("import os\n" + "x = 1\r\n" * 1000 + "return x", id="blocked-import-crlf"),
    pytest.param("_pml_call = 1\n" + "y = 2\n" * 1000, id="reserved-name"),
    pytest.param('token = "ghp_' + "a" * 36 + '"\n' + "# pad\n" * 1000, id="secret"),
    pytest.param("raise SystemExit(0)\n" + "# ünïcødé ✓\n" * 1000, id="unicode"),
]


@pytest.mark.parametrize("code", HOSTILE)
def test_the_child_answers_what_checking_in_place_answers(process: Any, code: str) -> None:
    analysis, program = process.call("study", (code, 10**7))
    expected_analysis, expected_program = in_place(code)
    assert same(analysis, expected_analysis)
    assert same(program, expected_program)
    assert process.pid not in (None, os.getpid())


async def test_a_large_snippet_s_program_is_kept_with_its_analysis_and_errors_match() -> None:
    code = large(2)
    analysis = await study.analysis(code, 10**6, ("acme", "web", "ada"))
    assert analysis == analyze_snippet(code, max_code_bytes=10**6)
    assert cached_program(code) == build_program(code)
    assert await study.program(code, 10**6, None) is cached_program(code)
    broken = "def f(:\n" + "# pad\n" * 1000
    with pytest.raises(CodeSyntaxError) as raised:
        await study.analysis(broken, 10**6, None)
    assert raised.value.data == {"line": 1, "column": 7}


async def test_a_program_that_failed_is_not_built_twice() -> None:
    code = "import socket\n" + "x = 1\n" * 1000
    before = cpu_process.PROCESS.answered
    for _ in range(3):
        with pytest.raises(ExecutionFailed, match="module 'socket' is not available"):
            await study.program(code, 10**6, ("acme", "web", "ada"))
    assert cpu_process.PROCESS.answered == before + 1


def test_a_job_past_its_cpu_limit_is_refused_and_the_child_keeps_serving() -> None:
    child = cpu_process.CpuProcess(cpu_limit_s=1)
    try:
        with pytest.raises(LimitExceeded, match="more than 1 s of CPU") as raised:
            child.call("study", (heavy(25_000), 10**7))
        assert raised.value.data == {"limit": "check_cpu_s", "max": 1}
        pid = child.pid
        code = large(3)
        assert same(child.call("study", (code, 10**7))[1], build_program(code))
        assert child.pid == pid  # the same child: the limit is a refusal, not a crash
    finally:
        child.close()


async def test_a_snippet_past_the_cpu_limit_is_limit_exceeded_for_its_analysis_and_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_process, "PROCESS", cpu_process.CpuProcess(cpu_limit_s=1))
    code = heavy(25_000, seed=9)
    try:
        with pytest.raises(LimitExceeded, match="more than 1 s of CPU"):
            await study.analysis(code, 10**7, ("acme", "web", "ada"))
        answered = cpu_process.PROCESS.answered
        with pytest.raises(LimitExceeded, match="more than 1 s of CPU"):
            await study.program(code, 10**7, ("acme", "web", "ada"))
        assert cpu_process.PROCESS.answered == answered  # remembered, not tried again
    finally:
        cpu_process.PROCESS.close()


def test_a_child_killed_mid_job_fails_that_job_only(process: Any) -> None:
    process.call("study", (large(4), 10**7))  # started
    pid = process.pid
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(ExecutionFailed, match=r"process stopped .*exit status -9"):
            process.call("study", (heavy(25_000, seed=1), 10**7))
    finally:
        killer.cancel()
    code = large(5)
    assert same(process.call("study", (code, 10**7))[1], build_program(code))  # a new child
    assert process.pid not in (None, pid)
    assert process.starts == 2


def test_a_job_past_the_wall_limit_stops_the_child() -> None:
    child = cpu_process.CpuProcess()
    try:
        # The child's start (imports) is not timed: on a busy machine it can take seconds.
        child.call("study", (large(6), 10**7))
        child.wall_limit_s = 0.3
        pid = child.pid
        started = time.monotonic()
        with pytest.raises(ExecutionFailed, match=r"took longer than 0\.3 s"):
            child.call("study", (heavy(25_000, seed=2), 10**7))
        assert time.monotonic() - started < 5
        assert child.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid or 0, 0)  # killed and reaped
    finally:
        child.close()


def test_an_unknown_job_is_an_error_and_the_child_keeps_serving(process: Any) -> None:
    with pytest.raises(RuntimeError, match=r"unknown job 'os\.system'"):
        process.call("os.system", ("true",))
    pairs = [("a\nb\n", "a\nc\n", "x@v1", "x@v2"), ("same", "same", "x@v2", "x@v3")]
    assert process.call("diffs", (pairs,)) == [unified_diff(*pair) for pair in pairs]
    assert process.starts == 1


def test_the_child_ends_when_its_input_closes(process: Any) -> None:
    process.call("study", (large(7), 10**7))
    child = process._child  # pyright: ignore[reportPrivateUsage]
    child.stdin.close()
    assert child.wait(timeout=10) == 0


async def test_where_no_child_can_start_the_check_runs_here(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    monkeypatch.setattr(cpu_process, "PROCESS", cpu_process.CpuProcess())
    code = large(8)
    assert await study.analysis(code, 10**6, None) == analyze_snippet(code, max_code_bytes=10**6)
    assert cached_program(code) == build_program(code)
    assert "heavy requests are worked in the gateway's own process" in caplog.text


async def test_a_tenant_s_full_queue_is_busy_and_others_still_queue() -> None:
    lane = cpu_process.CpuLane(queue_limit=1)
    flood, other = ("evil", "p", "u"), ("good", "p", "u")
    release = anyio.Event()
    entered: list[tuple[str, str, str]] = []

    async def hold(tenant: tuple[str, str, str]) -> None:
        async with lane.turn(tenant):
            entered.append(tenant)
            await release.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(hold, flood)  # runs
        group.start_soon(hold, flood)  # waits
        group.start_soon(hold, other)  # waits in its own queue
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(Busy, match="Too many large requests at once") as busy:
            await hold(flood)
        assert busy.value.data["queuePerTenant"] == 1
        assert busy.value.data["retryAfterS"] > 0
        release.set()
    assert entered == [flood, other, flood]  # the other org's turn came first


# A child whose kernel-side CPU count runs ahead of what ``getrusage`` reports (as it does
# after minutes of work on a busy machine: the kernel samples CPU time at each tick).
_DRIFTED_CHILD = """
import resource, signal, time
from pml import cpu_worker

real = resource.getrusage
class Drifted:
    def __init__(self, usage):
        self.usage = usage
    def __getattr__(self, name):
        value = getattr(self.usage, name)
        return 0.0 if name in ("ru_utime", "ru_stime") else value
resource.getrusage = lambda who: Drifted(real(who))
signal.signal(signal.SIGPROF, cpu_worker._out_of_time)
signal.signal(signal.SIGXCPU, cpu_worker._out_of_time)
end = time.process_time() + 2.5
while time.process_time() < end:
    pass
code = "\\n".join(f'a{i} = f"v{{x}} {i}"' for i in range(1500)) + "\\nreturn 1"
ok, value = cpu_worker.answer("study", (code, 10**7), 2)  # ~0.4 s of CPU
print(ok, type(value).__name__)
"""


def test_the_cpu_limit_counts_from_the_job_s_start_not_from_the_cpu_reported_so_far() -> None:
    # Measured: with the limit set as "CPU used so far + limit", a long-lived child refused
    # every job at once after ~90 s of work on a busy machine.
    done = subprocess.run(
        [sys.executable, "-c", _DRIFTED_CHILD], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "tuple"]
