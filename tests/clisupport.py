"""What the CLI tests share: an isolated environment and the one-line error contract."""

from __future__ import annotations

import os
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
