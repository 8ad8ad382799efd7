"""What the CLI tests share: an isolated environment and the one-line error contract."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import Result


def sub_app(register: Callable[[typer.Typer], None]) -> typer.Typer:
    """A stand-in ``pml`` root (with its ``--config`` option) holding one command group."""
    app = typer.Typer()

    @app.callback()
    def root(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        config: Annotated[Path | None, typer.Option("--config")] = None,
    ) -> None:
        ctx.obj = {"config": config}

    register(app)
    return app


def isolate_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No PML_ variables, no real default database, no stray ./pml.toml; the working dir."""
    for key in [key for key in os.environ if key.startswith("PML_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "200")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return workdir


def assert_one_line_error(result: Result, code: str) -> str:
    """The command failed with exit 1 and exactly one ``error: CODE: ...`` line, no traceback."""
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}: ")
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


TERMINAL_WAIT_S = 60.0


def on_terminal(
    args: list[str], env: dict[str, str], cwd: Path, answer: str, prompt: bytes = b"[y/N]"
) -> tuple[int, str]:
    """The real ``pml ...`` on a pseudo-terminal; ``answer`` typed at ``prompt``."""
    master, slave = os.openpty()
    try:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "pml"), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    output = bytearray()
    try:
        if _read(master, output, until=prompt):
            os.write(master, answer.encode() + b"\n")
            _read(master, output, until=None)
        code = process.wait(timeout=TERMINAL_WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=TERMINAL_WAIT_S)
        os.close(master)
    return code, output.decode("utf-8", "replace").replace("\r\n", "\n")


def _read(master: int, output: bytearray, *, until: bytes | None) -> bool:
    """Read the terminal until ``until`` shows (True) or the program ends (False)."""
    deadline = time.monotonic() + TERMINAL_WAIT_S
    while until is None or until not in output:
        ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no answer from pml within {TERMINAL_WAIT_S} s: {bytes(output)!r}"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every end of the terminal's other side is closed
            chunk = b""
        if not chunk:
            return False
        output += chunk
    return True
