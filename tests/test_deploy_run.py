"""The commands of the deployment files, run the way the container and the service run them,
without an engine or systemd: the image's ``CMD`` (or the unit's ``ExecStartPre`` and
``ExecStart``) with their environment migrates a blank PostgreSQL database and serves; the
image's ``HEALTHCHECK`` passes; a first admin key is made beside it as ``docker compose
exec`` would; SIGTERM stops it cleanly. ``PML_DEPLOY_BIN`` points these at another
virtualenv's ``bin`` (e.g. one built by the Dockerfile's steps); default: this one's.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

import httpx
import pytest

from deploy_rules import (
    DOCKERFILE,
    ENV_EXAMPLE,
    UNIT,
    compose_pml_environment,
    dockerfile_instructions,
    env_file_entries,
    exec_form,
    final_stage,
    healthcheck_command,
    image_environment,
    unit_entries,
)
from e2e.support import free_port, kill_all, process_tree, wait_gone
from pml.storage.database import head_revision

BIN = Path(os.environ.get("PML_DEPLOY_BIN") or Path(sys.executable).parent)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def healthcheck(port: int) -> list[str]:
    """The image's HEALTHCHECK command, on this port, with this virtualenv's python."""
    command = healthcheck_command(final_stage(dockerfile_instructions(DOCKERFILE.read_text())))
    assert command is not None
    assert command[0] == "python"
    return [str(BIN / "python"), *(part.replace(":8765/", f":{port}/") for part in command[1:])]


def container_start(database_url: str, port: int, home: Path) -> tuple[list[str], dict[str, str]]:
    """The image's CMD and the environment compose gives it (pml.env from the example)."""
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    command = exec_form([i.args for i in final_stage(instructions) if i.keyword == "CMD"][-1])
    assert command is not None
    environ = image_environment(instructions)
    environ["PATH"] = (
        environ["PATH"].replace("/opt/pml/bin", str(BIN)).replace("$PATH", "/usr/bin:/bin")
    )
    environ["HOME"] = str(home)
    environ.update(compose_pml_environment("unused"), PML_DATABASE_URL=database_url)
    return [part.replace("0.0.0.0:8765", f"127.0.0.1:{port}") for part in command], environ


def service_start(database_url: str, port: int, home: Path) -> tuple[list[str], dict[str, str]]:
    """The unit's ExecStartPre then ExecStart, with its EnvironmentFile= and Environment=."""
    service = [
        (key, value)
        for section, key, value in unit_entries(UNIT.read_text())
        if section == "Service"
    ]
    steps = [value for key, value in service if key in {"ExecStartPre", "ExecStart"}]
    script = (
        " && exec ".join(steps)
        .replace("/opt/pml/bin/", f"{BIN}/")
        .replace("127.0.0.1:8765", f"127.0.0.1:{port}")
    )
    environ = {"PATH": SYSTEMD_PATH, **env_file_entries(ENV_EXAMPLE.read_text())}
    for key, value in service:
        if key == "Environment":
            name, _, setting = value.partition("=")
            environ[name] = setting
    assert environ["HOME"] == dict(service)["WorkingDirectory"] == "/var/lib/pml"
    environ.update(HOME=str(home), PML_DATABASE_URL=database_url)
    return ["/bin/sh", "-c", script], environ


class Output:
    """A process's merged stdout and stderr, read by one thread, waited on line by line."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put("")  # end of output

    def wait_for(self, needle: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """The next line holding ``needle`` (bounded; the end of output fails)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if not line:
                break
            self.seen.append(line)
            if needle in line:
                return line
        shown = "".join(self.seen)[-3000:]
        raise AssertionError(f"no {needle!r} within {timeout_s:.0f} s:\n{shown}")


@contextmanager
def started(
    argv: list[str], environ: dict[str, str], cwd: Path
) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    """Run ``argv`` until it announces the gateway; kill whatever of its tree is left after."""
    process = subprocess.Popen(
        argv,
        env=environ,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    tree: dict[int, list[str]] = {}
    try:
        assert process.stdout is not None
        output = Output(process.stdout)
        output.wait_for("PML gateway: MCP at")
        tree = process_tree(process.pid)
        yield process, output
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)
        kill_all(wait_gone([pid for pid in tree if pid != process.pid], timeout_s=2.0))


def pml(environ: dict[str, str], cwd: Path, *args: str) -> str:
    """``pml ARGS...`` beside the gateway, as ``docker compose exec pml pml ...`` runs it."""
    done = subprocess.run(
        [str(BIN / "pml"), *args],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"pml {' '.join(args)}: {done.stderr}"
    return done.stdout


def reload_as_deployed(how: str, environ: dict[str, str], cwd: Path, pid: int) -> None:
    """``docker compose exec pml pml reload``, or the unit's ExecReload with its $MAINPID."""
    if how == "container":
        told = json.loads(pml(environ, cwd, "reload", "--json"))
        assert [gateway["pid"] for gateway in told] == [pid]
        return
    units = unit_entries(UNIT.read_text())
    command = next(value for _, key, value in units if key == "ExecReload")
    argv = [word.replace("$MAINPID", str(pid)) for word in command.split()]
    assert subprocess.run(argv, timeout=10, check=False).returncode == 0


@pytest.mark.postgres
@pytest.mark.e2e
@pytest.mark.usefixtures("anyio_backend")
@pytest.mark.parametrize("how", ["container", "systemd"])
def test_the_deploy_commands_migrate_a_blank_database_serve_reload_and_stop_on_sigterm(
    how: str, blank_postgres_url: str, tmp_path: Path
) -> None:
    port = free_port()
    start = container_start if how == "container" else service_start
    argv, environ = start(blank_postgres_url, port, tmp_path)
    with started(argv, environ, tmp_path) as (process, output):
        upgraded = "".join(output.seen)
        assert f"to {head_revision()}" in upgraded, "pml db upgrade ran first, on a blank database"
        assert subprocess.run(healthcheck(port), timeout=30, check=False).returncode == 0
        made = pml(environ, tmp_path, "keys", "create", "--org", "acme", "--project", "web",
                   "--user", "ana", "--role", "admin", "--json")  # fmt: skip
        api = f"http://127.0.0.1:{port}/api/capabilities"
        bearer = {"Authorization": f"Bearer {json.loads(made)['key']}"}
        assert httpx.get(api, headers=bearer, timeout=10).status_code == 200
        assert httpx.get(api, timeout=10).status_code == 401
        reload_as_deployed(how, environ, tmp_path, process.pid)
        assert "no change" in output.wait_for("reloaded")
        assert process.poll() is None
        assert subprocess.run(healthcheck(port), timeout=30, check=False).returncode == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 0


class _Ready(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/ready" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False), (None, False)])
def test_the_healthcheck_passes_only_when_ready_answers_200(
    status: int | None, healthy: bool
) -> None:
    handler = type("Handler", (_Ready,), {"status": status or 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    if status is None:
        server.server_close()  # nothing listens on the port any more
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = subprocess.run(healthcheck(port), capture_output=True, timeout=30, check=False)
    finally:
        if status is not None:
            server.shutdown()
            server.server_close()
    assert (done.returncode == 0) is healthy, done.stderr
