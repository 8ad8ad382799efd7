"""Three ``pml serve --http`` replicas on one PostgreSQL behind a real HAProxy.

Nothing here imports pytest, so ``benchmarks/replicas.py`` uses it too::

    url = await fresh_database(POSTGRES_URL, "pml_replicas_x")      # migrated, empty
    config = write_config(workdir / "pml.toml", servers, database_url=url)
    with replicas_behind_haproxy(config, workdir, count=3) as cluster:
        async with http_client(cluster.mcp_url, key, mode="legacy") as client: ...
        cluster.kill("pml2")                                         # kill -9, children too

HAProxy runs ``deploy/haproxy.cfg`` itself, with this run's free ports in place of the
example's addresses, so the documented set-up is the tested one. Every process started here
is stopped by the helper that started it, failure or not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import httpx
import httpx2
import sqlalchemy as sa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from e2e.support import (
    PML,
    REPO,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    E2eSetupError,
    free_port,
    kill_all,
    session_members,
    wait_gone,
)
from pml.storage.database import Database

HAPROXY_CONFIG = REPO / "deploy" / "haproxy.cfg"
EXAMPLE_FRONTEND = "127.0.0.1:8080"
EXAMPLE_REPLICAS = ("127.0.0.1:8761", "127.0.0.1:8762", "127.0.0.1:8763")
REPLICA_HEADER = "x-pml-replica"
POSTGRES_URL = os.environ.get(
    "PML_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def haproxy_binary() -> str:
    """HAProxy's executable (``PML_TEST_HAPROXY``, else on PATH or /usr/sbin)."""
    named = os.environ.get("PML_TEST_HAPROXY")
    found = named or shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.access(found, os.X_OK):
        raise E2eSetupError(f"haproxy not found at {found} (.ci/ensure-haproxy installs it)")
    return found


# -- PostgreSQL -------------------------------------------------------------------------


async def _admin(admin_url: str, statement: str) -> None:
    url = sa.make_url(admin_url)
    conn = await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        database=url.database,
        timeout=5,
    )
    try:
        await conn.execute(statement)  # pyright: ignore[reportUnknownMemberType]
    finally:
        await conn.close()  # pyright: ignore[reportUnknownMemberType]


async def fresh_database(admin_url: str, name: str) -> str:
    """A new, migrated database ``name`` on the server of ``admin_url``; its URL."""
    await _admin(admin_url, f'CREATE DATABASE "{name}"')
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    db = await Database.open(url)
    await db.close()
    return url


async def drop_database(admin_url: str, name: str) -> None:
    await _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- replicas ------------------------------------------------------------------------------


@dataclass(slots=True)
class Replica:
    """One ``pml serve --http 127.0.0.1:PORT``, in a process session of its own."""

    name: str
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    terminated: bool = False
    killed: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def start(self, config: Path) -> None:
        self.terminated = False
        self.killed = False
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(PML), "--config", str(config), "serve", "--http", f"127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=config.parent,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # a crash leaves its stack
                start_new_session=True,  # its upstream children share its session: one kill
            )

    def died(self) -> bool:
        """It exited though nobody stopped or killed it."""
        return (
            self.process is not None
            and self.process.poll() is not None
            and not (self.terminated or self.killed)
        )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``GET /ready`` until 200 (bounded); fail with the log if it exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.tail()}")
            with suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/ready", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready in {timeout_s:.0f} s:\n{self.tail()}")

    def kill(self) -> None:
        """``kill -9`` the replica and everything it started (no goodbye to anyone)."""
        if self.process is None:
            return
        self.killed = True
        members = session_members(self.process.pid)
        kill_all(members)
        self.process.wait(timeout=STOP_TIMEOUT_S)
        kill_all(wait_gone(members, timeout_s=2.0))

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), once: a second SIGTERM would cut its shutdown short."""
        if self.process is not None and self.process.poll() is None and not self.terminated:
            self.terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM, bounded wait, then SIGKILL whatever of its session is left."""
        if self.process is None:
            return
        members = session_members(self.process.pid)
        self.terminate()
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        kill_all(wait_gone(members, timeout_s=2.0))

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass(slots=True)
class Cluster:
    """The replicas and the HAProxy in front of them."""

    config: Path
    port: int
    replicas: dict[str, Replica]
    balancer: subprocess.Popen[bytes] | None = None
    balancer_log: Path | None = None
    killed: list[str] = field(default_factory=list[str])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def kill(self, name: str) -> None:
        self.replicas[name].kill()
        self.killed.append(name)

    def deaths(self) -> str:
        """The exit code and log of every replica that exited on its own ("" for none)."""
        return "\n".join(
            f"{name} exited with {replica.process.returncode if replica.process else None}:\n"
            f"{replica.tail()}"
            for name, replica in self.replicas.items()
            if replica.died()
        )

    def restart(self, name: str) -> None:
        """Start a stopped or killed replica again and wait until it is ready."""
        replica = self.replicas[name]
        replica.start(self.config)
        replica.wait_ready()

    def wait_balanced(self, names: Sequence[str], timeout_s: float = START_TIMEOUT_S) -> None:
        """Until HAProxy sends requests to every replica of ``names`` (its health checks
        have found them up)."""
        deadline = time.monotonic() + timeout_s
        seen: set[str] = set()
        while time.monotonic() < deadline:
            with suppress(httpx.TransportError):
                response = httpx.get(f"{self.url}/health", timeout=2.0)
                seen.add(response.headers.get(REPLICA_HEADER, ""))
            if set(names) <= seen:
                return
            time.sleep(0.05)
        raise AssertionError(f"HAProxy never sent a request to {set(names) - seen}")


def stop_all(replicas: Sequence[Replica]) -> None:
    """Stop every replica, all asked at once (each may take its graceful-shutdown time)."""
    for replica in replicas:
        replica.terminate()
    for replica in replicas:
        replica.stop()


def balancer_config(port: int, replica_ports: Sequence[int]) -> str:
    """``deploy/haproxy.cfg`` with this run's ports (and only as many servers as replicas)."""
    text = HAPROXY_CONFIG.read_text()
    assert EXAMPLE_FRONTEND in text, "deploy/haproxy.cfg no longer binds the example address"
    text = text.replace(f"bind {EXAMPLE_FRONTEND}", f"bind 127.0.0.1:{port}")
    lines: list[str] = []
    for line in text.splitlines():
        address = next((a for a in EXAMPLE_REPLICAS if line.strip().endswith(a)), None)
        if address is None:
            lines.append(line)
            continue
        index = EXAMPLE_REPLICAS.index(address)
        if index < len(replica_ports):
            lines.append(line.replace(address, f"127.0.0.1:{replica_ports[index]}"))
    return "\n".join(lines) + "\n"


@contextmanager
def replicas_behind_haproxy(config: Path, workdir: Path, *, count: int = 3) -> Iterator[Cluster]:
    """``count`` replicas of ``config`` behind HAProxy (round-robin, no stickiness)."""
    haproxy = haproxy_binary()
    replicas = {
        f"pml{index}": Replica(f"pml{index}", free_port(), workdir / f"pml{index}.log")
        for index in range(1, count + 1)
    }
    cluster = Cluster(config, free_port(), replicas)
    with ExitStack() as cleanup:
        cleanup.callback(stop_all, list(replicas.values()))
        for replica in replicas.values():
            replica.start(config)
        for replica in replicas.values():
            replica.wait_ready()
        balancer_file = workdir / "haproxy.cfg"
        balancer_file.write_text(balancer_config(cluster.port, [r.port for r in replicas.values()]))
        cluster.balancer_log = workdir / "haproxy.log"
        with cluster.balancer_log.open("ab") as out:
            cluster.balancer = subprocess.Popen(
                [haproxy, "-db", "-f", str(balancer_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        cleanup.callback(_stop_balancer, cluster.balancer)
        cluster.wait_balanced(list(replicas))
        yield cluster


def _stop_balancer(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


# -- clients that see which replica answered ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hop:
    """One HTTP request of a client and the replica that answered it."""

    http: str  # GET, POST, DELETE
    rpc: str  # the JSON-RPC method, "reply" for an answer to the server, "" for none
    replica: str
    status: int
    session: str | None  # the request's Mcp-Session-Id


def _rpc_of(request: httpx2.Request) -> str:
    if request.method != "POST":
        return ""
    try:
        body: object = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return "?"
    if isinstance(body, dict):
        method = body.get("method")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return method if isinstance(method, str) else "reply"
    return "?"


class Hops:
    """Which replica answered each HTTP request of one client (HAProxy's X-Pml-Replica)."""

    def __init__(self) -> None:
        self.items: list[Hop] = []
        self._changed = anyio.Event()

    async def record(self, response: httpx2.Response) -> None:
        request = response.request
        hop = Hop(
            request.method,
            _rpc_of(request),
            response.headers.get(REPLICA_HEADER, ""),
            response.status_code,
            request.headers.get("mcp-session-id"),
        )
        self.items.append(hop)
        self._changed.set()
        self._changed = anyio.Event()

    def replicas(self, rpc: str | None = None, http: str | None = None) -> list[str]:
        """The replicas that answered, in order (only requests of ``rpc`` / ``http``)."""
        return [
            hop.replica
            for hop in self.items
            if (rpc is None or hop.rpc == rpc) and (http is None or hop.http == http)
        ]

    def session_id(self) -> str:
        """The session id the client sent (a 2025-11-25 session)."""
        ids = {hop.session for hop in self.items if hop.session}
        assert len(ids) == 1, f"expected one session id, got {ids}"
        return ids.pop()

    async def first(self, matches: Callable[[Hop], bool], timeout_s: float = 15.0) -> Hop:
        """The first hop that ``matches``, waiting for it if need be (bounded)."""
        with anyio.fail_after(timeout_s):
            while True:
                found = next((hop for hop in self.items if matches(hop)), None)
                if found is not None:
                    return found
                await self._changed.wait()


@asynccontextmanager
async def balanced_client(
    url: str,
    key: str,
    hops: Hops,
    *,
    mode: str = "auto",
    message_handler: Any = None,
    elicitation_callback: Any = None,
) -> AsyncGenerator[Client]:
    """The SDK client over streamable HTTP with ``Authorization: Bearer KEY``, each of its
    requests recorded in ``hops``."""
    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
            event_hooks={"response": [hops.record]},
        ) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            message_handler=message_handler,
            elicitation_callback=elicitation_callback,
        ) as client,
    ):
        yield client
