"""A failed server is named with the line of its stderr that says why (issue: instant start).

Real crashes first: Node.js and Python servers that die at start, through the real pool;
then the line picker on its own, with hostile and unusual stderr.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from pml.config import ServerSettings
from pml.upstream.pool import ClientPool
from pml.upstream.stderr_lines import MAX_LINE_CHARS, meaningful_line

pytestmark = pytest.mark.anyio

NODE = shutil.which("node")


async def test_a_node_crash_is_named_by_its_error_line_not_its_stack(tmp_path: Path) -> None:
    assert NODE is not None, "Node.js is a requirement of PML's set-up (README)"
    script = tmp_path / "server.js"
    script.write_text("require('./no-such-module-here');\n")
    async with ClientPool({"js": ServerSettings(command=NODE, args=[str(script)])}) as pool:
        status = pool.status()[0]
    assert status.state == "failed"
    assert status.last_error is not None
    reason = status.last_error.split("; stderr: ", 1)[1]
    assert reason.startswith("Error: Cannot find module './no-such-module-here'")
    assert " at " not in reason
    assert "Node.js" not in reason


async def test_a_python_crash_is_named_by_its_exception_line() -> None:
    code = "import json\ndef main():\n    raise ValueError('bad setting: port')\nmain()\n"
    settings = ServerSettings(command=sys.executable, args=["-c", code])
    async with ClientPool({"py": settings}) as pool:
        status = pool.status()[0]
    assert status.state == "failed"
    assert status.last_error is not None
    assert status.last_error.endswith("; stderr: ValueError: bad setting: port")


def test_a_node_trace_gives_the_error_statement() -> None:
    lines = [
        "file:///srv/index.js:3",
        "  throw new TypeError('apiKey must be a string');",
        "  ^",
        "",
        "TypeError: apiKey must be a string",
        "    at main (file:///srv/index.js:3:9)",
        "    at file:///srv/index.js:5:1",
        "",
        "Node.js v20.19.2",
    ]
    assert meaningful_line(lines) == "TypeError: apiKey must be a string"


def test_an_error_with_a_code_in_brackets_is_an_error_statement() -> None:
    lines = [
        "node:internal/errors:496",
        "Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'zod' imported from /srv/x.js",
        "    at new NodeError (node:internal/errors:405:5)",
    ]
    assert meaningful_line(lines).startswith("Error [ERR_MODULE_NOT_FOUND]: Cannot find package")


def test_a_chained_python_traceback_gives_its_last_exception() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 3, in <module>',
        "KeyError: 'TOKEN'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 5, in <module>',
        "RuntimeError: set TOKEN in the environment",
    ]
    assert meaningful_line(lines) == "RuntimeError: set TOKEN in the environment"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], ""),
        (["", "   ", "\t"], ""),
        (["Starting server...", "listening on stdio"], "listening on stdio"),
        (["    at foo (x.js:1:1)", "Node.js v22.0.0"], ""),
        (["fatal: not a git repository"], "fatal: not a git repository"),
        (
            ["error: unexpected argument '--bogus' found"],
            "error: unexpected argument '--bogus' found",
        ),
        (
            ["warning: deprecated", "panic: runtime error: index out of range"],
            "panic: runtime error: index out of range",
        ),
        (["errors: 0, warnings: 2", "ready"], "ready"),
    ],
    ids=["empty", "blank", "plain", "only-noise", "git", "cli", "go-panic", "not-an-error-word"],
)
def test_the_reason_of_unusual_stderr(lines: list[str], expected: str) -> None:
    assert meaningful_line(lines) == expected


@pytest.mark.parametrize(
    "line",
    [
        "Error: " + "x" * 100_000,
        "Error: 日本語のエラー 🙂 " * 50,
        "Error: '; DROP TABLE servers; -- \x1b[31mred\x1b[0m",
    ],
    ids=["huge", "unicode", "injection"],
)
def test_a_hostile_reason_is_bounded_and_kept_as_text(line: str) -> None:
    reason = meaningful_line(["some banner", line, "    at x (y.js:1:1)"])
    assert reason == line.strip()[:MAX_LINE_CHARS]
    assert len(reason) <= MAX_LINE_CHARS
