"""Helpers of the ``pml agent`` end-to-end tests: a config on the scripted model, the CLI
run once, and a conversation driven on a real pseudo-terminal.

    config = agent_config(tmp_path, servers, llm, "time", "filesystem", "memory")
    answer = agent_once(config, "what time is it in Tokyo")          # the --json object
    with AgentTerminal(config) as term:
        term.expect(b"you> "); term.send("write hello into notes.txt")
        term.expect(b"[d]eny: "); term.send("o")
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import termios
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from e2e.support import PML, Upstream, sqlite_url, write_config

KEY_VARIABLE = "PML_E2E_LLM_KEY"
KEY_VALUE = "sk-e2e-scripted-0123456789"
WAIT_S = 60.0


def no_router(body: dict[str, Any]) -> None:
    """The scripted endpoint's answer to a structured (router, sensitivity) request: HTTP 503,
    so PML falls back to its heuristics and the executor's script stays in step."""
    del body


def agent_config(
    tmp_path: Path, servers: dict[str, Upstream], base_url: str, *names: str, **extra: Any
) -> Path:
    """A ``pml.toml`` with ``names`` servers and ``[llm]`` on the scripted endpoint."""
    tables: dict[str, Any] = {
        "llm": {"base_url": base_url, "model": "scripted", "api_key_env": KEY_VARIABLE},
        **extra,
    }
    return write_config(
        tmp_path / "pml.toml",
        [servers[name] for name in names],
        database_url=sqlite_url(tmp_path),
        expose_upstream=False,
        extra=tables,
    )


def agent_env() -> dict[str, str]:
    return {**os.environ, KEY_VARIABLE: KEY_VALUE, "NO_COLOR": "1"}


def agent_once(config: Path, prompt: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    """``pml agent --once PROMPT --json`` without a terminal: exit code, answer, stderr."""
    done = subprocess.run(
        [str(PML), "--config", str(config), "agent", "--once", prompt, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=config.parent,
        env=agent_env(),
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"pml agent printed nothing (exit {done.returncode}): {done.stderr}"
    return done.returncode, json.loads(lines[-1]), done.stderr


def _own_terminal() -> None:
    """In the child: a new session whose controlling terminal is the pty (so Ctrl-C typed
    there is a SIGINT to the agent, as in a real terminal)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class AgentTerminal:
    """``pml agent`` (a conversation, or ``--once``) on a pseudo-terminal."""

    def __init__(self, config: Path, *args: str) -> None:
        self._config = config
        self._args = args
        self.output = bytearray()
        self._master = -1
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        master, slave = os.openpty()
        try:
            self.process = subprocess.Popen(
                [str(PML), "--config", str(self._config), "agent", *self._args],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=agent_env(),
                cwd=self._config.parent,
                preexec_fn=_own_terminal,
            )
        finally:
            os.close(slave)
        self._master = master
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=WAIT_S)
        os.close(self._master)

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")

    def expect(self, marker: bytes, *, after: int = 0) -> int:
        """Read until ``marker`` shows after byte ``after``; its end offset."""
        deadline = time.monotonic() + WAIT_S
        while marker not in self.output[after:]:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._master], [], [], max(left, 0))
            assert ready, f"{marker!r} did not show within {WAIT_S} s:\n{self.text[-3000:]}"
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                chunk = b""
            assert chunk, f"pml agent ended before {marker!r}:\n{self.text[-3000:]}"
            self.output += chunk
        return self.output.index(marker, after) + len(marker)

    def send(self, line: str) -> int:
        """Type ``line`` and Enter; the offset output had before."""
        mark = len(self.output)
        os.write(self._master, line.encode() + b"\n")
        return mark

    def interrupt(self) -> int:
        """Ctrl-C, as the terminal sends it (the foreground process gets SIGINT)."""
        mark = len(self.output)
        os.write(self._master, b"\x03")
        return mark

    def wait(self) -> int:
        assert self.process is not None
        try:
            while True:
                ready, _, _ = select.select([self._master], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(self._master, 65536)
                    except OSError:
                        chunk = b""
                    self.output += chunk
                    if not chunk:
                        break
                elif self.process.poll() is not None:
                    break
            return self.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pml agent did not end:\n{self.text[-3000:]}") from None


def audit_rows(config: Path) -> list[dict[str, Any]]:
    from e2e.support import pml_cli

    lines = pml_cli(config, "audit", "tail", "--json", "--limit", "2000").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
