"""``pml dashboard``: loopback only, a one-time sign-in URL, the local database's facts."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from pml.web.dashboard.sessions import SESSION_COOKIE

URL = re.compile(r"http://127\.0\.0\.1:(\d+)/ui/signin\?token=([A-Za-z0-9_-]+)")
START_WAIT_S = 60.0
PML = str(Path(sys.executable).with_name("pml"))


def write_config(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    config = tmp_path / "pml.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n'
        '[scope]\norg = "acme"\nproject = "webapp"\n'
        '[discovery]\nembedder = "hashing"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PML_")}
    env["USER"] = "ana"
    return config, env


@contextmanager
def running_dashboard(tmp_path: Path, *extra: str) -> Iterator[tuple[str, int, str]]:
    """``pml dashboard --port 0`` on a pseudo-terminal, as a person starts it; yields
    (URL, port, what the terminal showed so far)."""
    config, env = write_config(tmp_path)
    master, slave = os.openpty()
    try:
        child = subprocess.Popen(
            [PML, "--config", str(config), "dashboard", "--port", "0", *extra],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    seen = ""
    deadline = time.monotonic() + START_WAIT_S
    try:
        while (match := URL.search(seen)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no sign-in URL in time: {seen!r}"
            assert child.poll() is None, f"pml dashboard exited: {seen!r}"
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the terminal's other side is closed
                    chunk = b""
                seen += chunk.decode("utf-8", "replace")
        yield match.group(0), int(match.group(1)), seen
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        os.close(master)


def test_without_a_terminal_pml_dashboard_refuses_and_prints_no_link(tmp_path: Path) -> None:
    config, env = write_config(tmp_path)
    result = subprocess.run(  # as an agent's shell runs it: pipes, no terminal
        [PML, "--config", str(config), "dashboard", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: FORBIDDEN: pml dashboard needs a person")
    assert len(result.stderr.splitlines()) == 1
    assert "signin" not in result.stdout + result.stderr
    assert "token" not in result.stdout + result.stderr


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (from /proc/net)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_pml_dashboard_listens_on_loopback_only_and_its_url_signs_in_once(
    tmp_path: Path,
) -> None:
    with running_dashboard(tmp_path) as (url, port, _):
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as browser:
            signed = browser.get(url, follow_redirects=False)
            assert signed.status_code == 303
            assert SESSION_COOKIE in browser.cookies
            page = browser.get("/ui/capabilities")
            assert page.status_code == 200
            assert "ana" in page.text
            assert "acme/webapp" in page.text
        with httpx.Client() as stranger:
            again = stranger.get(url, follow_redirects=False)
            assert again.status_code == 403
            assert SESSION_COOKIE not in stranger.cookies
            assert stranger.get(f"http://127.0.0.1:{port}/ui/approvals").status_code == 303


def test_pml_dashboard_refuses_a_guessed_token_and_offers_no_api_key_sign_in(
    tmp_path: Path,
) -> None:
    with (
        running_dashboard(tmp_path) as (_, port, _),
        httpx.Client(base_url=f"http://127.0.0.1:{port}") as guess,
    ):
        for token in ("x", "A" * 43, "' OR 1=1 --", "\u202e" * 10, "a" * 5000):
            answer = guess.get("/ui/signin", params={"token": token})
            assert answer.status_code == 403
        login = guess.get("/ui/login")
        assert "pml dashboard" in login.text
        assert 'name="key"' not in login.text
        assert guess.get("/api/approvals").status_code == 404


def test_pml_dashboard_has_no_option_to_listen_elsewhere(tmp_path: Path) -> None:
    result = subprocess.run(
        [PML, "dashboard", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    assert "--host" in result.stderr


@pytest.mark.parametrize("port", ["-1", "65536", "http", "8766; rm -rf /"])
def test_a_bad_port_is_refused_before_anything_starts(tmp_path: Path, port: str) -> None:
    result = subprocess.run(
        [PML, "dashboard", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
