"""Helpers for the end-to-end tests and the proxy benchmark: real servers, real processes.

Nothing here imports pytest, so ``benchmarks/proxy_overhead.py`` uses it too::

    deps = install_npm_deps()
    servers = reference_servers(deps, workdir)            # time, git, filesystem, memory, ...
    config = write_config(workdir / "pml.toml", servers, database_url=sqlite_url(workdir))
    async with pml_stdio(config, workdir / "pml.log") as gateway:
        result = await gateway.client.call_tool("time__get_current_time", {"timezone": "UTC"})

Every process started here is stopped by the helper that started it, and every wait is
bounded; the process-tree helpers read ``/proc`` (Linux), as the machines do.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2
import tomli_w
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# PML_E2E_PML runs the suite against another pml executable (e.g. an installed one).
PML = Path(os.environ.get("PML_E2E_PML") or BIN / "pml")
DEPS_SCRIPT = REPO / "scripts" / "e2e-deps.sh"
DEPS_TIMEOUT_S = 600.0
CLI_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

# The tools SPEC §3 lists for every gateway, whatever its configuration.
META_TOOLS = frozenset(
    {
        "pml_discover",
        "pml_execute",
        "cap_list",
        "cap_lookup",
        "cap_whois",
        "cap_rename",
        "cap_history",
        "cap_curate",
    }
)


class E2eSetupError(RuntimeError):
    """Something the end-to-end tests need could not be installed or found."""


# -- npm dependencies --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NpmDeps:
    """The pinned npm packages installed by ``scripts/e2e-deps.sh``."""

    modules: Path

    @property
    def node22(self) -> Path:
        """Node 22 (the Inspector needs it; the machines' own node may be 20)."""
        return self.modules / ".bin" / "node"

    @property
    def inspector(self) -> Path:
        return self.modules / "@modelcontextprotocol" / "inspector/clients/launcher/build/index.js"

    def server_js(self, name: str) -> Path:
        """The entry point of ``@modelcontextprotocol/server-<name>``."""
        return self.modules / "@modelcontextprotocol" / f"server-{name}" / "dist" / "index.js"


def install_npm_deps(timeout_s: float = DEPS_TIMEOUT_S) -> NpmDeps:
    """Run the idempotent install script (a no-op when already installed)."""
    try:
        done = subprocess.run(
            ["bash", str(DEPS_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise E2eSetupError(f"{DEPS_SCRIPT.name} took more than {timeout_s:.0f} s") from None
    except OSError as error:
        raise E2eSetupError(f"cannot run {DEPS_SCRIPT.name}: {error}") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise E2eSetupError(f"{DEPS_SCRIPT.name} failed (exit {done.returncode}):\n{tail}")
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise E2eSetupError(f"{DEPS_SCRIPT.name} printed no path")
    return NpmDeps(Path(lines[-1]))


def host_node() -> str:
    """The machine's own ``node``, which runs the reference servers."""
    node = shutil.which("node")
    if node is None:
        raise E2eSetupError("node not found on PATH (Node.js >= 20 is a prerequisite)")
    return node


def python_server(name: str) -> Path:
    """A console script of the venv (``mcp-server-time``, ``mcp-server-git``)."""
    path = BIN / name
    if not path.exists():
        raise E2eSetupError(f"{path} not found: install the dev extras (pip install -e '.[dev]')")
    return path


# -- upstream servers and configs --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Upstream:
    """One real MCP server, as PML's config names it and as a direct client starts it."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict[str, str])

    def params(self) -> StdioServerParameters:
        """Start parameters for a direct SDK client (no PML in between)."""
        return StdioServerParameters(
            command=self.command, args=list(self.args), env=dict(self.env) or None
        )

    def config(self) -> dict[str, Any]:
        """The ``[servers.NAME]`` table."""
        table: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env:
            table["env"] = dict(self.env)
        return table


def make_git_repo(path: Path) -> Path:
    """An empty git repository with one untracked file, written without running git."""
    git = path / ".git"
    for folder in ("objects", "refs/heads", "refs/tags"):
        (git / folder).mkdir(parents=True, exist_ok=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
    )
    (path / "hello.txt").write_text("hello from the e2e repo\n")
    return path


def reference_servers(deps: NpmDeps, workdir: Path) -> dict[str, Upstream]:
    """The five reference servers of the brief, on private folders under ``workdir``."""
    node = host_node()
    repo = make_git_repo(workdir / "repo")
    files = workdir / "files"
    files.mkdir(exist_ok=True)
    (files / "note.txt").write_text("PML end-to-end note\n")
    servers = [
        Upstream("time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")),
        Upstream("git", str(python_server("mcp-server-git")), ("--repository", str(repo))),
        Upstream("filesystem", node, (str(deps.server_js("filesystem")), str(files))),
        Upstream(
            "memory",
            node,
            (str(deps.server_js("memory")),),
            {"MEMORY_FILE_PATH": str(workdir / "memory.jsonl")},
        ),
        Upstream("everything", node, (str(deps.server_js("everything")), "stdio")),
    ]
    return {server.name: server for server in servers}


LIST_WAIT_S = 60.0


def sqlite_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'pml.db'}"


def write_config(
    path: Path,
    servers: Iterable[Upstream],
    *,
    database_url: str,
    expose_upstream: bool = True,
    org: str = "local",
    project: str = "default",
    upstream: Mapping[str, float] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """A ``pml.toml`` naming ``servers``, on its own database (``upstream``: pool settings;
    ``extra``: more top-level tables, e.g. ``permissions``)."""
    data: dict[str, Any] = {
        "database_url": database_url,
        "expose_upstream": expose_upstream,
        "scope": {"org": org, "project": project, "user": "e2e"},
        "servers": {server.name: server.config() for server in servers},
    }
    # Listings wait for every server that starts (the default window, 2 s, is a choice
    # for agents; a loaded test machine may start a server more slowly).
    data["upstream"] = {"list_wait_s": LIST_WAIT_S, **(upstream or {})}
    data.update(extra or {})
    path.write_text(tomli_w.dumps(data))
    return path


# -- results ----------------------------------------------------------------------------


def result_json(result: CallToolResult) -> dict[str, Any]:
    """A PML tool's JSON: ``structuredContent``, else its text parsed."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert texts, f"no structuredContent and no text in {result!r}"
    return cast(dict[str, Any], json.loads(texts[0]))


def error_of(result: CallToolResult) -> dict[str, Any]:
    """The ``{"code", "message"}`` of a failed PML tool call (asserts it failed)."""
    assert result.is_error, f"expected an error result, got {result!r}"
    error = result_json(result).get("error")
    assert isinstance(error, dict), f"no error object in {result!r}"
    return cast(dict[str, Any], error)


def comparable(result: CallToolResult) -> dict[str, Any]:
    """What a pass-through must keep unchanged: content, structuredContent, isError."""
    return {
        "content": [block.model_dump(mode="json") for block in result.content],
        "structuredContent": result.structured_content,
        "isError": bool(result.is_error),
    }


# -- processes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Proc:
    ppid: int
    session: int
    argv: list[str]


def _proc_entries() -> dict[int, _Proc]:
    """Every live (non-zombie) process we can read, by pid."""
    table: dict[int, _Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # The command name in stat is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie has exited; only its parent has not reaped it yet
            continue
        argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        table[int(entry.name)] = _Proc(int(fields[1]), int(fields[3]), argv)
    return table


def session_members(session: int) -> list[int]:
    """Live processes of a session (a process started with ``start_new_session``)."""
    return [pid for pid, proc in _proc_entries().items() if proc.session == session]


def find_pids(argument: str) -> list[int]:
    """Live processes one of whose arguments is exactly ``argument``."""
    return [pid for pid, proc in _proc_entries().items() if argument in proc.argv]


def process_tree(root: int) -> dict[int, list[str]]:
    """``root`` and its live descendants, pid → argv."""
    table = _proc_entries()
    tree: dict[int, list[str]] = {}
    if root in table:
        tree[root] = table[root].argv
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, proc in table.items():
            if proc.ppid == parent and pid not in tree:
                tree[pid] = proc.argv
                frontier.append(pid)
    return tree


def child_running(root: int, needle: str) -> int:
    """The pid of the one descendant of ``root`` whose command line contains ``needle``."""
    found = [
        pid
        for pid, argv in process_tree(root).items()
        if pid != root and any(needle in part for part in argv)
    ]
    assert len(found) == 1, f"expected one child running {needle!r} under {root}, got {found}"
    return found[0]


def alive(pids: Iterable[int]) -> list[int]:
    table = _proc_entries()
    return [pid for pid in pids if pid in table]


def wait_gone(pids: Iterable[int], timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    """Wait (bounded) until none of ``pids`` runs; return those still running."""
    pending = list(pids)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = alive(pending)
    return alive(pending)


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return cast(int, sock.getsockname()[1])


# Ports a server may be restarted on: below the kernel's ephemeral range (32768 and up
# here), from which ``free_port`` and every outgoing connection take theirs: one of those
# could take a stopped server's port before its restart.
RESTART_PORTS = range(20000, 32000)


def restartable_port() -> int:
    """A loopback port outside the ephemeral range that nothing uses now (see above)."""
    for _ in range(200):
        port = random.randrange(RESTART_PORTS.start, RESTART_PORTS.stop)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


# -- the pml CLI -------------------------------------------------------------------------


def pml_cli(config: Path, *args: str, timeout_s: float = CLI_TIMEOUT_S) -> str:
    """Run ``pml --config CONFIG ARGS...``; return stdout, fail with stderr."""
    done = subprocess.run(
        [str(PML), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=config.parent,
    )
    assert done.returncode == 0, f"pml {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def create_key(config: Path, org: str, project: str, user: str | None = None) -> dict[str, Any]:
    """``pml keys create ... --json``: ``{"key", "org", "project", "user", "id"}``."""
    args = ["keys", "create", "--org", org, "--project", project, "--json"]
    if user is not None:
        args += ["--user", user]
    return cast(dict[str, Any], json.loads(pml_cli(config, *args)))


# -- the gateway over stdio --------------------------------------------------------------


@dataclass(slots=True)
class StdioGateway:
    """A running ``pml serve --stdio`` and the SDK client talking to it."""

    client: Client
    pid: int
    log: Path

    def stderr(self) -> str:
        return _tail(self.log)


def _tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:]


def pml_stdio_params(config: Path, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``pml serve --stdio`` with ``config`` (``env``: merged over the SDK's default one)."""
    return StdioServerParameters(
        command=str(PML),
        args=["--config", str(config), "serve", "--stdio"],
        cwd=config.parent,
        env=env,
    )


@asynccontextmanager
async def pml_stdio(
    config: Path,
    log: Path,
    *,
    mode: str = "auto",
    message_handler: Any = None,
    env: dict[str, str] | None = None,
) -> AsyncGenerator[StdioGateway]:
    """Start ``pml serve --stdio`` through the SDK client; check no process outlives it.

    Leaving the block closes the client, which stops the gateway; every process of its tree
    must then be gone within the stop timeout (PML stops its upstream servers), else they
    are killed and an AssertionError names them.
    """
    with log.open("w") as errlog:
        tree: dict[int, list[str]] = {}
        failed = False
        try:
            async with AsyncExitStack() as stack:
                transport = stdio_client(pml_stdio_params(config, env), errlog=errlog)
                try:
                    client = await stack.enter_async_context(
                        Client(transport, mode=mode, message_handler=message_handler)
                    )
                except Exception as error:
                    failed = True
                    tail = _tail(log)
                    raise AssertionError(f"pml serve --stdio did not start:\n{tail}") from error
                pids = find_pids(str(config))
                assert len(pids) == 1, f"expected one pml process for {config}, got {pids}"
                gateway = StdioGateway(client, pids[0], log)
                try:
                    yield gateway
                except BaseException:
                    failed = True
                    raise
                finally:
                    tree = process_tree(gateway.pid)
        finally:
            leaked = wait_gone(tree)
            kill_all(leaked)
            if leaked and not failed:
                shown = {pid: " ".join(tree[pid])[:120] for pid in leaked}
                raise AssertionError(f"processes left running after the gateway stopped: {shown}")


# -- the gateway over HTTP ---------------------------------------------------------------


@dataclass(slots=True)
class HttpGateway:
    """A running ``pml serve --http 127.0.0.1:PORT``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def stderr(self) -> str:
        return _tail(self.log)


def wait_healthy(gateway: HttpGateway, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``GET /health`` on loopback until it answers 200 (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            raise AssertionError(
                f"pml serve --http exited {gateway.process.returncode}:\n{gateway.stderr()}"
            )
        try:
            if httpx.get(f"{gateway.base_url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"/health did not answer within {timeout_s:.0f} s:\n{gateway.stderr()}")


def stop_process_tree(process: subprocess.Popen[bytes]) -> list[int]:
    """SIGTERM the process, wait (bounded), then SIGKILL whatever of its tree is left.

    Returns the pids that were still running after the graceful stop (a leak).
    """
    tree = process_tree(process.pid)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
    leaked = wait_gone([pid for pid in tree if pid != process.pid], timeout_s=2.0)
    kill_all(leaked)
    return leaked


@contextmanager
def pml_http(
    config: Path, log: Path, *, extra_args: Sequence[str] = (), port: int | None = None
) -> Iterator[HttpGateway]:
    """Start ``pml serve --http`` on a loopback port (a free one unless ``port`` is given);
    stop its whole tree on exit."""
    port = port if port is not None else free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                str(PML),
                "--config",
                str(config),
                "serve",
                "--http",
                f"127.0.0.1:{port}",
                *extra_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
        )
    gateway = HttpGateway(process, port, log)
    failed = False
    try:
        wait_healthy(gateway)
        yield gateway
    except BaseException:
        failed = True
        raise
    finally:
        leaked = stop_process_tree(process)
        if leaked and not failed:
            raise AssertionError(f"processes left running after pml serve --http stopped: {leaked}")


@asynccontextmanager
async def http_client(
    url: str,
    key: str | None,
    *,
    mode: str = "auto",
    message_handler: Any = None,
    extra_headers: Mapping[str, str] | None = None,
) -> AsyncGenerator[Client]:
    """The SDK client over streamable HTTP, sending ``Authorization: Bearer KEY``."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    headers.update(extra_headers or {})
    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            message_handler=message_handler,
        ) as client,
    ):
        yield client


# -- the MCP Inspector CLI ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InspectorRun:
    returncode: int
    stdout: str
    stderr: str
    leftover: tuple[int, ...] = ()  # processes still running 10 s after it exited (killed)

    def result(self) -> dict[str, Any]:
        """The MCP result of a successful ``--format json`` run (``{"result": ...}``)."""
        assert self.returncode == 0, f"inspector exited {self.returncode}: {self.stderr[-2000:]}"
        return cast(dict[str, Any], json.loads(self.stdout)["result"])

    def error(self) -> dict[str, Any]:
        """The ``{"code", "message"}`` envelope a failed ``--format json`` run prints."""
        assert self.returncode != 0, f"inspector succeeded: {self.stdout[-2000:]}"
        return cast(dict[str, Any], json.loads(self.stderr.strip().splitlines()[-1])["error"])


def run_inspector(
    deps: NpmDeps, home: Path, *args: str, timeout_s: float = CLI_TIMEOUT_S
) -> InspectorRun:
    """``inspector --cli ARGS`` on Node 22, its state kept under ``home``; no process survives."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "MCP_CATALOG_PATH": str(home / "catalog.json"),
        "MCP_CLIENT_CONFIG_PATH": str(home / "client.json"),
        "NO_COLOR": "1",
    }
    process = subprocess.Popen(
        [str(deps.node22), str(deps.inspector), "--cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_all(session_members(process.pid))
        out, err = process.communicate(timeout=STOP_TIMEOUT_S)
        message = f"inspector did not finish in {timeout_s:.0f} s: {err[-2000:]!r}"
        raise AssertionError(message) from None
    finally:
        # The Inspector stops the server it started; whatever is left of its session is killed.
        leftover = wait_gone(session_members(process.pid), timeout_s=STOP_TIMEOUT_S)
        kill_all(leftover)
    text = {"stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace")}
    return InspectorRun(process.returncode, **text, leftover=tuple(leftover))
