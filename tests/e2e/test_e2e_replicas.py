"""Three ``pml serve --http`` replicas on one PostgreSQL behind a real HAProxy, round-robin
and without stickiness (``deploy/haproxy.cfg``), driven by the SDK client in both protocol
generations: 2025-11-25 sessions (``Mcp-Session-Id``) and stateless 2026-07-28.

HAProxy names the replica that answered each request (``X-Pml-Replica``), so every test
checks that its traffic did cross replicas. The kill test runs last: it kills one replica
with SIGKILL under load and starts it again.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from e2e.replicas import (
    POSTGRES_URL,
    Cluster,
    Hops,
    balanced_client,
    drop_database,
    fresh_database,
    haproxy_binary,
    replicas_behind_haproxy,
)
from e2e.support import (
    E2eSetupError,
    NpmDeps,
    create_key,
    pml_cli,
    reference_servers,
    result_json,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.anyio]

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
LEGACY, MODERN = "legacy", "auto"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
COPY_INTENT = "copy the note to a new file"
COPY_NOTE = """
note = await mcp.filesystem.read_text_file(path=args["src"])
text = note["content"] if isinstance(note, dict) else note
await mcp.filesystem.write_file(path=args["dst"], content=text.upper())
return "copied"
"""


@dataclass(frozen=True, slots=True)
class Deployment:
    cluster: Cluster
    config: Path
    files: Path
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return self.cluster.mcp_url

    def headers(self, key: str = "acme", **extra: str) -> dict[str, str]:
        return {**MCP_HEADERS, "Authorization": f"Bearer {self.keys[key]}", **extra}


@pytest.fixture(scope="module")
def deployment(
    npm_deps: NpmDeps, postgres_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    try:
        haproxy_binary()
    except E2eSetupError as error:
        if IN_CI:
            pytest.fail(f"{error} (CI=true requires the replicas suite)")
        pytest.skip(f"{error}; run .ci/ensure-haproxy or set CI=true to make this a failure")
    workdir = tmp_path_factory.mktemp("replicas")
    name = f"pml_replicas_{uuid.uuid4().hex[:10]}"
    database_url = anyio.run(fresh_database, POSTGRES_URL, name)
    try:
        servers = reference_servers(npm_deps, workdir)
        config = write_config(
            workdir / "pml.toml",
            [servers["time"], servers["filesystem"]],
            database_url=database_url,
            extra={"log": {"access": True}},
        )
        keys = {
            "acme": create_key(config, "acme", "web", "alice")["key"],
            "globex": create_key(config, "globex", "web", "bob")["key"],
        }
        admin = pml_cli(
            config,
            *("keys", "create", "--org", "acme", "--project", "web"),
            *("--user", "ops", "--role", "admin", "--json"),
        )
        keys["admin"] = json.loads(admin)["key"]
        with replicas_behind_haproxy(config, workdir) as cluster:
            yield Deployment(cluster, config, workdir / "files", keys)
    finally:
        anyio.run(drop_database, POSTGRES_URL, name)


@pytest.fixture(autouse=True)
def no_replica_died(deployment: Deployment) -> Iterator[None]:
    """A replica that exits on its own fails the test it happened in, with its log: the
    tests that follow would otherwise only see connections refused."""
    assert not deployment.cluster.deaths(), deployment.cluster.deaths()
    yield
    deaths = deployment.cluster.deaths()
    assert not deaths, f"a replica died during this test:\n{deaths}"


def _answer(decision: str, asked: list[str]) -> Any:
    async def answer(
        _context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"decision": decision})

    return answer


def _copy(deployment: Deployment, target: str) -> dict[str, Any]:
    files = deployment.files
    return {
        "intent": COPY_INTENT,
        "code": COPY_NOTE,
        "args": {"src": str(files / "note.txt"), "dst": str(files / target)},
    }


async def _post(url: str, headers: dict[str, str], body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10.0) as http:
        return await http.post(url, content=json.dumps(body), headers=headers)


# -- sessions of both generations ---------------------------------------------------------


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_every_replica_serves_the_client_whatever_its_protocol_generation(
    deployment: Deployment, mode: str
) -> None:
    hops = Hops()
    async with balanced_client(deployment.url, deployment.keys["acme"], hops, mode=mode) as client:
        listings = [{tool.name for tool in (await client.list_tools()).tools} for _ in range(6)]
        now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})

    assert all(names == listings[0] for names in listings)
    assert {"pml_execute", "time__get_current_time", "filesystem__write_file"} <= listings[0]
    assert result_json(now)["timezone"] == "UTC"
    assert set(hops.replicas("tools/list")) == set(deployment.cluster.replicas)
    assert {hop.status for hop in hops.items if hop.http == "POST"} <= {200, 202}
    if mode == LEGACY:  # one session throughout, opened on one replica, used on all
        assert hops.session_id()


async def test_a_session_ended_by_its_client_is_gone_on_every_replica(
    deployment: Deployment,
) -> None:
    hops = Hops()
    async with balanced_client(deployment.url, deployment.keys["acme"], hops, mode=LEGACY) as c:
        for _ in range(3):
            await c.list_tools()
    session_id = hops.session_id()
    asked_everywhere = [
        await _post(
            replica.mcp_url, deployment.headers(**{"Mcp-Session-Id": session_id}), LIST_TOOLS
        )
        for replica in deployment.cluster.replicas.values()
    ]

    assert [hop.http for hop in hops.items][-1] == "DELETE"
    assert [response.status_code for response in asked_everywhere] == [404, 404, 404]


# -- approvals ------------------------------------------------------------------------------


async def test_an_approval_made_on_one_replica_resumes_a_run_paused_on_another(
    deployment: Deployment,
) -> None:
    hops = Hops()
    target = deployment.files / "approved-elsewhere.txt"
    async with balanced_client(deployment.url, deployment.keys["acme"], hops) as client:
        paused = result_json(await client.call_tool("pml_execute", _copy(deployment, target.name)))
        assert paused["status"] == "approval_required", paused
        paused_on = hops.replicas("tools/call")[-1]
        approver = next(r for n, r in deployment.cluster.replicas.items() if n != paused_on)
        async with httpx.AsyncClient(timeout=10.0) as http:
            decided = await http.post(
                f"{approver.url}/api/approvals/{paused['workflowId']}",
                json={"approved": True, "grant": "once"},
                headers={"Authorization": f"Bearer {deployment.keys['admin']}"},
            )
        resume = {"workflow_id": paused["workflowId"], "approved": True}
        done = result_json(
            await client.call_tool("pml_execute", {"intent": "go on", "continue_workflow": resume})
        )

    assert decided.status_code == 200, decided.text
    assert done["status"] == "success", done
    assert target.read_text() == "PML END-TO-END NOTE\n"
    assert approver.name != paused_on


async def test_a_2025_session_s_answer_to_the_approval_form_reaches_the_replica_that_asked(
    deployment: Deployment,
) -> None:
    hops, asked = Hops(), list[str]()
    answer = _answer("once", asked)
    results: list[dict[str, Any]] = []
    async with balanced_client(
        deployment.url, deployment.keys["acme"], hops, mode=LEGACY, elicitation_callback=answer
    ) as client:
        for index in range(3):
            call = _copy(deployment, f"elicited-{index}.txt")
            results.append(result_json(await client.call_tool("pml_execute", call)))
    called = hops.replicas("tools/call")
    replied = hops.replicas("reply")

    assert [result["status"] for result in results] == ["success"] * 3, results
    assert len(asked) == 3
    assert all((deployment.files / f"elicited-{i}.txt").exists() for i in range(3))
    assert len(called) == len(replied) == 3
    assert any(a != b for a, b in zip(called, replied, strict=True)), (called, replied)


async def test_a_2026_client_s_answer_to_the_approval_form_is_taken_by_any_replica(
    deployment: Deployment,
) -> None:
    hops, asked = Hops(), list[str]()
    target = deployment.files / "stateless.txt"
    async with balanced_client(
        deployment.url, deployment.keys["acme"], hops, elicitation_callback=_answer("once", asked)
    ) as client:
        done = result_json(await client.call_tool("pml_execute", _copy(deployment, target.name)))
    called = hops.replicas("tools/call")

    assert done["status"] == "success", done
    assert len(asked) == 1
    assert target.exists()
    assert len(called) == 2
    assert called[0] != called[1]


# -- tool-list changes ------------------------------------------------------------------------


class ToolListChanged:
    """A 2025-11-25 client's message handler: set once ``tools/list_changed`` arrives."""

    def __init__(self) -> None:
        self.heard = anyio.Event()

    async def __call__(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.heard.set()


async def test_a_rename_on_one_replica_reaches_clients_connected_through_the_others(
    deployment: Deployment,
) -> None:
    key = deployment.keys["acme"]
    name = f"relay:n{secrets.token_hex(3)}"
    learner_hops = Hops()
    async with balanced_client(deployment.url, key, learner_hops) as learner:
        learned = result_json(
            await learner.call_tool(
                "pml_execute", {"intent": "seven", "code": "return 7", "name": name}
            )
        )
    assert learned["status"] == "success", learned
    legacy_hops, modern_hops, changed = Hops(), Hops(), ToolListChanged()
    async with (
        balanced_client(
            deployment.url, key, legacy_hops, mode=LEGACY, message_handler=changed
        ) as legacy,
        balanced_client(deployment.url, key, modern_hops) as modern,
    ):
        await legacy.list_tools()
        stream = await legacy_hops.first(lambda hop: hop.http == "GET" and hop.status == 200)
        async with modern.listen(tools_list_changed=True) as events:
            [listening] = modern_hops.replicas("subscriptions/listen")
            holders = {stream.replica, listening}
            renamer = next(r for n, r in deployment.cluster.replicas.items() if n not in holders)
            async with balanced_client(renamer.mcp_url, key, Hops(), mode=LEGACY) as direct:
                renamed = await direct.call_tool(
                    "cap_rename", {"name": name, "new_name": f"{name}x"}
                )
            with anyio.fail_after(20):
                event = await events.__anext__()
                await changed.heard.wait()
        after = {tool.name for tool in (await legacy.list_tools()).tools}

    assert not renamed.is_error, renamed
    assert isinstance(event, ToolsListChanged)
    assert f"mcp__relay__{name.split(':')[1]}x" in after


# -- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "session_id",
    [
        secrets.token_hex(16),  # well-formed, never issued
        uuid.uuid4().hex.upper(),
        "' OR '1'='1",
        "../../../../etc/passwd",
        "0" * 31,
        "f" * 33,
        "a" * 4096,
        "%00" + "a" * 29,
    ],
    ids=["forged", "upper-case", "sql", "path", "short", "long", "4k", "nul"],
)
async def test_a_session_id_no_replica_issued_is_not_found_anywhere(
    deployment: Deployment, session_id: str
) -> None:
    headers = deployment.headers(**{"Mcp-Session-Id": session_id})
    answers = [await _post(deployment.url, headers, LIST_TOOLS) for _ in range(3)]
    answers += [
        await _post(replica.mcp_url, headers, LIST_TOOLS)
        for replica in deployment.cluster.replicas.values()
    ]

    assert {response.status_code for response in answers} == {404}
    assert all("tools" not in response.text for response in answers)


@pytest.mark.parametrize("size", [40_000, 1_000_000], ids=["40k", "1m"])
async def test_a_huge_session_header_is_refused_by_the_balancer_and_every_replica_stays_ready(
    deployment: Deployment, size: int
) -> None:
    headers = deployment.headers(**{"Mcp-Session-Id": "a" * size})
    try:
        refused: int | str = (await _post(deployment.url, headers, LIST_TOOLS)).status_code
    except httpx.TransportError as error:  # closed while the client was still sending
        refused = type(error).__name__
    async with httpx.AsyncClient(timeout=5.0) as http:
        ready = [
            (await http.get(f"{replica.url}/ready")).status_code
            for replica in deployment.cluster.replicas.values()
        ]

    assert refused in (400, 431, "ReadError", "WriteError", "RemoteProtocolError")
    assert ready == [200, 200, 200]


async def test_a_session_cannot_be_used_with_another_key_on_any_replica(
    deployment: Deployment,
) -> None:
    hops = Hops()
    async with balanced_client(deployment.url, deployment.keys["acme"], hops, mode=LEGACY) as c:
        await c.list_tools()
        session_id = hops.session_id()
        stolen = {"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-11-25"}
        as_globex = [
            await _post(replica.mcp_url, deployment.headers("globex", **stolen), LIST_TOOLS)
            for replica in deployment.cluster.replicas.values()
        ]
        still_mine = await c.list_tools()

    assert [response.status_code for response in as_globex] == [404, 404, 404]
    assert all("pml_execute" not in response.text for response in as_globex)
    assert still_mine.tools


async def test_a_forged_reply_to_another_replica_decides_nothing_and_a_huge_one_is_refused(
    deployment: Deployment,
) -> None:
    hops = Hops()
    async with balanced_client(deployment.url, deployment.keys["acme"], hops, mode=LEGACY) as c:
        await c.list_tools()
        session = {"Mcp-Session-Id": hops.session_id(), "Mcp-Protocol-Version": "2025-11-25"}
        headers = deployment.headers(**session)
        foreign_id = (12345 << 32) + 1  # another replica's request numbering
        reply = {"jsonrpc": "2.0", "id": foreign_id, "result": {"action": "accept"}}
        small = [
            await _post(r.mcp_url, headers, reply) for r in deployment.cluster.replicas.values()
        ]
        huge = {**reply, "result": {"action": "accept", "content": {"x": "y" * 100_000}}}
        refused = await _post(deployment.url, headers, huge)
        other_key = await _post(deployment.url, deployment.headers("globex", **session), reply)
        garbled = await _post(deployment.url, headers, {"jsonrpc": "2.0", "id": foreign_id})
        still_mine = await c.list_tools()

    assert [response.status_code for response in small] == [202, 202, 202]
    assert refused.status_code == 413
    assert other_key.status_code == 404
    assert garbled.status_code == 400
    assert still_mine.tools


async def test_an_initialize_with_oversized_client_params_opens_no_session(
    deployment: Deployment,
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": {"huge": {"x": "y" * 100_000}}},
            "clientInfo": {"name": "hostile", "version": "0"},
        },
    }
    opened = await _post(deployment.url, deployment.headers(), initialize)
    session_id = opened.headers.get("mcp-session-id", "")
    headers = deployment.headers(**{"Mcp-Session-Id": session_id})
    used = [
        (await _post(replica.mcp_url, headers, LIST_TOOLS)).status_code
        for replica in deployment.cluster.replicas.values()
    ]

    assert "larger than 64 KiB" in opened.text
    assert "serverInfo" not in opened.text
    assert used == [404, 404, 404]


# -- a replica dies ---------------------------------------------------------------------------


@dataclass(slots=True)
class Load:
    """Clients calling ``pml_execute`` in a loop; what was learned, what failed."""

    deployment: Deployment
    calls: int
    learned: dict[str, int] = field(default_factory=dict[str, int])
    failed: list[str] = field(default_factory=list[str])
    halfway: anyio.Event = field(default_factory=anyio.Event)
    killed: anyio.Event = field(default_factory=anyio.Event)
    went_on: set[int] = field(default_factory=set[int])

    async def work(self, worker: int, mode: str) -> None:
        """``calls`` learned snippets; a call that fails is retried, on a new client when the
        old one broke with the connection (as a client whose server vanished does)."""
        done = 0
        for _attempt in range(5):
            try:
                async with balanced_client(
                    self.deployment.url, self.deployment.keys["acme"], Hops(), mode=mode
                ) as client:
                    while done < self.calls:
                        await self._learn(client, worker, done)
                        done += 1
                return
            except (MCPError, httpx2.TransportError, ExceptionGroup) as error:
                self.failed.append(f"{worker}/{done}: {error!r}"[:300])
        raise AssertionError(f"worker {worker} failed five times: {self.failed}")

    async def _learn(self, client: Client, worker: int, call: int) -> None:
        code = f"return {{'worker': {worker}, 'call': {call}, 'run': '{uuid.uuid4().hex}'}}"
        result = await client.call_tool("pml_execute", {"intent": "count calls", "code": code})
        answer = result_json(result)
        assert answer["status"] == "success", answer
        self.learned[answer["capabilityFqdn"]] = worker
        if self.killed.is_set():
            self.went_on.add(worker)
        if len(self.learned) >= self.calls:
            self.halfway.set()


# -- operating the replicas ---------------------------------------------------------------


def _counted(exposition: str, metric: str, **labels: str) -> float:
    """The sample of ``metric`` with exactly ``labels`` in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == metric and sample.labels == labels:
                return sample.value
    return 0.0


async def test_traffic_through_the_balancer_shows_in_each_replica_s_metrics_and_access_log(
    deployment: Deployment,
) -> None:
    cluster = deployment.cluster
    admin = {"Authorization": f"Bearer {deployment.keys['admin']}"}
    tool = "time__get_current_time"
    labels = {"tool": tool, "lane": "mcp", "outcome": "ok"}

    async def scrape() -> dict[str, float]:
        counts: dict[str, float] = {}
        async with httpx.AsyncClient(timeout=10.0) as http:
            for name, replica in cluster.replicas.items():
                if name in cluster.killed:
                    continue
                response = await http.get(f"{replica.url}/metrics", headers=admin)
                assert response.status_code == 200, name
                counts[name] = _counted(response.text, "pml_tool_calls_total", **labels)
        return counts

    def access_lines(name: str) -> int:
        lines = cluster.replicas[name].log.read_text(errors="replace").splitlines()
        return sum(
            1
            for line in lines
            if line.startswith("{")
            and json.loads(line).get("event") == "tool_call"
            and json.loads(line).get("tool") == tool
        )

    before = await scrape()
    logged_before = {name: access_lines(name) for name in before}
    hops = Hops()
    async with balanced_client(
        deployment.url, deployment.keys["acme"], hops, mode=MODERN
    ) as client:
        for _ in range(9):
            await client.call_tool(tool, {"timezone": "UTC"})
    served = Counter(hops.replicas("tools/call"))
    after = await scrape()

    assert sum(served.values()) == 9
    assert len(served) >= 2, f"round-robin should spread the calls: {served}"
    for name, calls in served.items():
        assert after[name] - before[name] == calls, name
        assert access_lines(name) - logged_before[name] == calls, name


async def test_a_replica_killed_mid_traffic_costs_only_its_in_flight_calls(
    deployment: Deployment,
) -> None:
    cluster, key, victim = deployment.cluster, deployment.keys["acme"], "pml2"
    workers = 4
    load = Load(deployment, calls=10)
    idle_hops = Hops()
    survivors = {name for name in cluster.replicas if name != victim}

    async def kill_halfway() -> None:
        await load.halfway.wait()
        await anyio.to_thread.run_sync(cluster.kill, victim)
        load.killed.set()

    with anyio.fail_after(90):
        async with balanced_client(deployment.url, key, idle_hops, mode=LEGACY) as idle:
            for _ in range(3):
                await idle.list_tools()
            before = len(idle_hops.items)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_halfway)
                for worker in range(workers):
                    tasks.start_soon(load.work, worker, LEGACY if worker % 2 else MODERN)
            answers = [await idle.call_tool("cap_list", {"limit": 500}) for _ in range(4)]
        listed = {item["fqdn"] for item in result_json(answers[-1])["items"]}
    served_before = set(idle_hops.replicas()[:before])
    served_after = {hop.replica for hop in idle_hops.items[before:] if hop.http == "POST"}

    await anyio.to_thread.run_sync(cluster.restart, victim)
    await anyio.to_thread.run_sync(cluster.wait_balanced, list(cluster.replicas))

    assert len(load.learned) == workers * load.calls
    assert set(load.learned) <= listed  # every capability whose learning was acknowledged
    assert len(load.failed) <= workers, load.failed  # at most one call in flight per client
    assert load.went_on == set(range(workers))  # every client went on after the kill
    assert victim in served_before
    assert served_after == survivors  # the idle session went on, on the replicas left
    assert all(not answer.is_error for answer in answers)
