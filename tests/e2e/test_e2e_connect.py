"""``pml connect`` against a shared ``pml serve --http`` on PostgreSQL (SPEC §9).

Two real processes on loopback: the shared gateway (no filesystem of its own; ``[routing]
local = ["filesystem"]``) and ``pml connect``, which owns a real
``@modelcontextprotocol/server-filesystem`` on a temporary folder and is driven by the SDK
client over stdio. Every run is counted in the database afterwards: one capability per
distinct snippet, one trace row per run, nothing seen by another tenant.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import httpx
import pytest
import sqlalchemy as sa
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from sqlalchemy.engine import make_url

from e2e.support import (
    PML,
    NpmDeps,
    Upstream,
    create_key,
    find_pids,
    http_client,
    kill_all,
    pml_http,
    process_tree,
    reference_servers,
    restartable_port,
    result_json,
    wait_gone,
    write_config,
)
from pml.storage.database import Database
from pml.storage.tables import capability_records as records
from pml.storage.tables import execution_traces, workflow_state

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.anyio]

ARRIVAL_TIMEOUT_S = 30.0


def read_snippet(name: str, marker: str = "") -> str:
    return (
        f'read = await mcp.filesystem.read_text_file(path=args.get("path", "{name}"))\n'
        'text = read["content"]\n'
        f'return {{"text": text, "marker": "{marker}"}}\n'
    )


@dataclass
class Shared:
    """The shared gateway's config, its port (fixed, so it can be restarted), its keys."""

    config: Path
    port: int
    log: Path
    database_url: str
    key: str
    other_key: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def files_server(npm_deps: NpmDeps, tmp_path: Path) -> tuple[Upstream, Path]:
    servers = reference_servers(npm_deps, tmp_path / "client")
    folder = tmp_path / "client" / "files"
    return servers["filesystem"], folder


def shared_gateway(
    tmp_path: Path, database_url: str, *, ttl_s: float = 3600.0, lease_s: float = 30.0
) -> Shared:
    (tmp_path / "server").mkdir()
    routing = {"local": ["filesystem"], "workflow_ttl_s": ttl_s, "trace_claim_lease_s": lease_s}
    config = write_config(
        tmp_path / "server" / "pml.toml",
        [],
        database_url=database_url,
        expose_upstream=False,
        extra={"routing": routing},
    )
    key = create_key(config, "acme", "web", "alice")["key"]
    other = create_key(config, "globex", "web", "bob")["key"]
    return Shared(config, restartable_port(), tmp_path / "server.log", database_url, key, other)


def client_config(tmp_path: Path, filesystem: Upstream) -> Path:
    folder = tmp_path / "connect"
    folder.mkdir(exist_ok=True)
    return write_config(
        folder / "pml.toml",
        [filesystem],
        database_url=f"sqlite:///{folder / 'local.db'}",
        expose_upstream=False,
    )


def two_sides(
    tmp_path: Path, database_url: str, files_server: tuple[Upstream, Path], **gateway: float
) -> tuple[Shared, Path, str, Path]:
    """The shared gateway, the client's config, the note it reads, its trace queue."""
    filesystem, folder = files_server
    shared = shared_gateway(tmp_path, database_url, **gateway)
    config = client_config(tmp_path, filesystem)
    return shared, config, str(folder / "note.txt"), tmp_path / "q.sqlite3"


@dataclass
class Connected:
    client: Client
    pid: int


@asynccontextmanager
async def pml_connect(
    config: Path, shared: Shared, queue: Path, log: Path
) -> AsyncGenerator[Connected]:
    """``pml connect`` started by the SDK client over stdio; its tree is gone afterwards."""
    params = StdioServerParameters(
        command=str(PML),
        args=[
            "--config",
            str(config),
            "connect",
            "--server",
            shared.base_url,
            "--api-key",
            shared.key,
            "--queue",
            str(queue),
        ],
        cwd=config.parent,
    )
    with log.open("a") as errlog:
        tree: dict[int, list[str]] = {}
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(stdio_client(params, errlog=errlog))
                )
                pids = find_pids(str(queue))
                assert len(pids) == 1, f"expected one pml connect, got {pids}"
                tree = process_tree(pids[0])
                yield Connected(client, pids[0])
        finally:
            kill_all(wait_gone(tree))


async def execute(client: Client, code: str, **extra: Any) -> dict[str, Any]:
    result = await client.call_tool("pml_execute", {"intent": "read a note", "code": code, **extra})
    answer = result_json(result)
    assert not result.is_error, answer
    return answer


async def capabilities(shared: Shared, key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key or shared.key}"}
    async with httpx.AsyncClient(timeout=10.0) as http:
        reply = await http.get(f"{shared.base_url}/api/capabilities", headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def wait_for_capabilities(shared: Shared, count: int) -> dict[str, Any]:
    """Poll ``GET /api/capabilities`` until ``count`` exist (bounded)."""
    deadline = anyio.current_time() + ARRIVAL_TIMEOUT_S
    while (listed := await capabilities(shared))["total"] < count:
        assert anyio.current_time() < deadline, f"{count} capabilities did not arrive: {listed}"
        await anyio.sleep(0.2)
    return listed


async def trace_rows(database_url: str) -> dict[str, int]:
    """How many trace rows each workflow id has."""
    db = await Database.open(database_url)
    try:
        query = sa.select(execution_traces.c.workflow_id, sa.func.count()).group_by(
            execution_traces.c.workflow_id
        )
        async with db.read() as conn:
            return {row[0]: row[1] for row in await conn.execute(query)}
    finally:
        await db.close()


async def wait_for_traces(database_url: str, count: int) -> None:
    """Poll the trace rows until ``count`` workflows have one (bounded)."""
    deadline = anyio.current_time() + ARRIVAL_TIMEOUT_S
    while len(await trace_rows(database_url)) < count:
        assert anyio.current_time() < deadline, "traces did not arrive in time"
        await anyio.sleep(0.2)


async def capability_count(database_url: str, org: str) -> int:
    db = await Database.open(database_url)
    try:
        query = (
            sa.select(sa.func.count())
            .select_from(records)
            .where(records.c.org == org, records.c.record_type == "capability")
        )
        async with db.read() as conn:
            return int((await conn.execute(query)).scalar_one())
    finally:
        await db.close()


async def post_traces(shared: Shared, key: str, traces: list[dict[str, Any]]) -> list[Any]:
    async with httpx.AsyncClient(timeout=10.0) as http:
        reply = await http.post(
            f"{shared.base_url}/api/traces",
            json={"traces": traces},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


async def test_a_local_snippet_runs_on_the_client_and_the_server_learns_it(
    tmp_path: Path, postgres_url: str, files_server: tuple[Upstream, Path]
) -> None:
    shared, config, note, queue = two_sides(tmp_path, postgres_url, files_server)
    with pml_http(shared.config, shared.log, port=shared.port):
        async with pml_connect(config, shared, queue, tmp_path / "c.log") as pc:
            listed = {tool.name for tool in (await pc.client.list_tools()).tools}
            async with http_client(f"{shared.base_url}/mcp", shared.key) as direct:
                on_server = {tool.name for tool in (await direct.list_tools()).tools}
                assert listed == on_server
                # A caller that is not a PML client is told how to connect.
                refused = await direct.call_tool(
                    "pml_execute", {"intent": "read", "code": read_snippet(note)}
                )
                assert result_json(refused)["error"]["code"] == "CLIENT_TOOLS_REQUIRE_CLIENT"
                assert "pml connect" in result_json(refused)["error"]["message"]

            first = await execute(pc.client, read_snippet(note))
            assert first["status"] == "success", first
            assert first["result"]["text"] == "PML end-to-end note\n"
            assert first["executedOn"] == "client"
            listed = await wait_for_capabilities(shared, 1)
            assert listed["items"][0]["display_name"].startswith("unnamed_")

            again = await execute(pc.client, read_snippet(note))
            assert again["result"]["text"] == "PML end-to-end note\n"
            await wait_for_traces(postgres_url, 2)

            # Replayed by hand: a duplicate; by another tenant: rejected.
            replay = {"workflowId": first["workflowId"], "success": True, "durationMs": 1.0}
            assert (await post_traces(shared, shared.key, [replay]))[0]["status"] == "duplicate"
            stolen = await post_traces(shared, shared.other_key, [replay])
            assert stolen[0]["status"] == "rejected"
            assert (await capabilities(shared, shared.other_key))["total"] == 0

    rows = await trace_rows(postgres_url)
    assert sorted(rows.values()) == [1, 1]
    assert set(rows) == {first["workflowId"], again["workflowId"]}
    assert await capability_count(postgres_url, "acme") == 1
    assert await capability_count(postgres_url, "globex") == 0


async def test_traces_of_runs_made_while_the_server_was_down_arrive_exactly_once(
    tmp_path: Path, postgres_url: str, files_server: tuple[Upstream, Path]
) -> None:
    shared, config, note, queue = two_sides(tmp_path, postgres_url, files_server)
    snippets = [read_snippet(note, marker) for marker in ("one", "two", "three")]
    with pml_http(shared.config, shared.log, port=shared.port):
        async with pml_connect(config, shared, queue, tmp_path / "c.log") as pc:
            await execute(pc.client, read_snippet(note, "warm-up"))
            await wait_for_capabilities(shared, 1)
    # The server is down: the client still runs code that only uses its own servers.
    async with pml_connect(config, shared, queue, tmp_path / "c.log") as pc:
        answers = [await execute(pc.client, code) for code in snippets]
        assert all(a["status"] == "success" and a.get("offline") for a in answers), answers
        assert [a["result"]["marker"] for a in answers] == ["one", "two", "three"]
        with pml_http(shared.config, shared.log, port=shared.port):
            listed = await wait_for_capabilities(shared, 4)
            assert listed["total"] == 4
    rows = await trace_rows(postgres_url)
    assert all(rows.get(a["workflowId"]) == 1 for a in answers), rows
    assert len(rows) == 4
    assert await capability_count(postgres_url, "acme") == 4


async def test_a_client_killed_with_unsynced_traces_sends_them_after_a_restart(
    tmp_path: Path, postgres_url: str, files_server: tuple[Upstream, Path]
) -> None:
    shared, config, note, queue = two_sides(tmp_path, postgres_url, files_server)
    answers: list[dict[str, Any]] = []
    with suppress(Exception):  # the client's session ends with the process, abruptly
        async with pml_connect(config, shared, queue, tmp_path / "c.log") as pc:
            for marker in ("crash-1", "crash-2"):
                answers.append(await execute(pc.client, read_snippet(note, marker)))
            os.kill(pc.pid, signal.SIGKILL)
            await anyio.sleep(0.2)
    assert len(answers) == 2, answers
    assert all(a["status"] == "success" for a in answers), answers
    with pml_http(shared.config, shared.log, port=shared.port):
        async with pml_connect(config, shared, queue, tmp_path / "c.log"):
            await wait_for_capabilities(shared, 2)
    rows = await trace_rows(postgres_url)
    assert rows == {a["workflowId"]: 1 for a in answers}


async def test_an_expired_workflow_creates_nothing(tmp_path: Path, postgres_url: str) -> None:
    shared = shared_gateway(tmp_path, postgres_url, ttl_s=1.0)
    as_client = {"X-PML-Client": "pml-connect/e2e", "X-PML-Client-Servers": "filesystem"}
    code = read_snippet("/tmp/none.txt")
    with pml_http(shared.config, shared.log, port=shared.port):
        url = f"{shared.base_url}/mcp"
        async with http_client(url, shared.key, extra_headers=as_client) as client:
            handed = result_json(
                await client.call_tool("pml_execute", {"intent": "read", "code": code})
            )
        assert handed["status"] == "execute_locally", handed
        assert handed["clientTools"] == ["filesystem:read_text_file"]
        await anyio.sleep(1.5)
        trace = {"workflowId": handed["workflowId"], "success": True, "durationMs": 3.0}
        results = await post_traces(shared, shared.key, [trace])
        assert results[0]["status"] == "expired"
        assert (await capabilities(shared))["total"] == 0
    assert await capability_count(postgres_url, "acme") == 0
    assert await trace_rows(postgres_url) == {}


async def test_a_gateway_killed_in_the_middle_of_a_batch_loses_no_trace(
    tmp_path: Path, postgres_url: str, files_server: tuple[Upstream, Path]
) -> None:
    shared, config, note, queue = two_sides(tmp_path, postgres_url, files_server, lease_s=2.0)
    database = make_url(postgres_url)
    blocker: Any = await asyncpg.connect(  # pyright: ignore[reportUnknownMemberType]
        host=database.host, port=database.port or 5432, user=database.username,
        database=database.database,
    )  # fmt: skip
    try:
        async with pml_connect(config, shared, queue, tmp_path / "c.log") as pc:
            with pml_http(shared.config, shared.log, port=shared.port) as gateway:
                # Trace rows cannot be written: the ingest claims, captures, then waits.
                await blocker.execute("BEGIN; LOCK TABLE execution_traces IN EXCLUSIVE MODE")
                answer = await execute(pc.client, read_snippet(note, "killed"))
                await wait_for_claim(postgres_url, answer["workflowId"])
                gateway.process.kill()  # SIGKILL, in the middle of that request
                gateway.process.wait(timeout=10)
                await blocker.execute("ROLLBACK")
            started = anyio.current_time()
            with pml_http(shared.config, shared.log, port=shared.port):
                await wait_for_traces(postgres_url, 1)
                learned_in = anyio.current_time() - started
                listed = await capabilities(shared)
    finally:
        await blocker.close()
    assert await trace_rows(postgres_url) == {answer["workflowId"]: 1}
    assert listed["total"] == 1
    assert await capability_count(postgres_url, "acme") == 1
    assert learned_in < 20, learned_in  # the lease (2 s) and a retry, not the default 30 s


async def wait_for_claim(database_url: str, workflow_id: str) -> None:
    """Poll until an ingest request holds the workflow (bounded)."""
    db = await Database.open(database_url)
    query = sa.select(workflow_state.c.kind).where(workflow_state.c.workflow_id == workflow_id)
    deadline = anyio.current_time() + ARRIVAL_TIMEOUT_S
    try:
        while True:
            async with db.read() as conn:
                kind = (await conn.execute(query)).scalar()
            if kind == "client_run:claimed":
                return
            assert anyio.current_time() < deadline, f"workflow {workflow_id} never claimed: {kind}"
            await anyio.sleep(0.1)
    finally:
        await db.close()
