"""``pml serve --stdio`` answers the opening request while it starts (``early_stdio``).

The early answer must be the one the gateway's SDK server gives (compared against a gateway
served without the early thread), exactly one answer per request must reach the client, and
the conversation must go on once the gateway serves — with real ``pml serve --stdio``
processes and the real SDK client.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from pml.gateway.early_stdio import HANDSHAKE_VERSIONS, MODERN_VERSIONS, opening_answer

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
PML = Path(sys.executable).parent / "pml"
WAIT_S = 60.0
CLIENT_META = {
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}

# A gateway served over stdio without the early thread: the SDK server answers everything.
SDK_ONLY = """
import sys, anyio
from gateway.upstreams import gateway_settings
from pml.gateway.serve_stdio import serve_stdio
anyio.run(lambda: serve_stdio(gateway_settings(sys.argv[1], expose_upstream=False)))
"""


def initialize(version: str, request_id: int | str = 1) -> dict[str, Any]:
    client = {"name": "t", "version": "1"}
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": client}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def discover(version: str, request_id: int | str = 1) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": version, **CLIENT_META}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "server/discover",
        "params": {"_meta": meta},
    }


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def converse(argv: list[str], payload: bytes, answers: int) -> list[dict[str, Any]]:
    """Send ``payload`` to a new process, read ``answers`` lines, close stdin, read the rest."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(SRC)])}
    received = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.open_process(argv, env=env, stderr=None) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(payload)
            while received.count(b"\n") < answers:
                received += await process.stdout.receive()
            await process.stdin.aclose()
            async for chunk in process.stdout:
                received += chunk
            await process.wait()
    return [json.loads(raw) for raw in received.splitlines()]


def config(tmp_path: Path, database_url: str | None = None) -> Path:
    path = tmp_path / "pml.toml"
    url = database_url or f"sqlite:///{tmp_path / 'pml.db'}"
    path.write_text(f'database_url = "{url}"\n[scope]\norg = "o"\nproject = "p"\n')
    return path


OPENINGS = [
    *(initialize(version) for version in HANDSHAKE_VERSIONS),
    initialize("2099-12-31"),  # unknown to both: the latest handshake version is offered
    *(discover(version) for version in MODERN_VERSIONS),
]


async def test_the_early_answers_are_the_sdk_servers_answers(tmp_path: Path) -> None:
    for opening in OPENINGS:
        found = opening_answer(json.dumps(opening).encode())
        assert found is not None, opening
        argv = [sys.executable, "-c", SDK_ONLY, f"sqlite:///{tmp_path / 'sdk.db'}"]
        (sdk,) = await converse(argv, line(opening), 1)
        assert {"jsonrpc": "2.0", "id": found[0], "result": found[1]} == sdk, opening


@pytest.mark.parametrize("opening", [OPENINGS[3], OPENINGS[-1]], ids=["handshake", "modern"])
async def test_each_request_is_answered_once_and_the_conversation_goes_on(
    tmp_path: Path, opening: dict[str, Any]
) -> None:
    follow: list[dict[str, Any]] = []
    if opening["method"] == "initialize":
        follow.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
        follow.append({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    else:
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSIONS[-1], **CLIENT_META}
        follow.append(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}}
        )
    payload = line(opening) + b"".join(line(message) for message in follow)
    argv = [str(PML), "--config", str(config(tmp_path)), "serve", "--stdio"]
    answers = await converse(argv, payload, 2)
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"] == opening_answer(json.dumps(opening).encode())[1]  # pyright: ignore[reportOptionalSubscript]
    assert "pml_execute" in [tool["name"] for tool in answers[1]["result"]["tools"]]


async def test_the_opening_is_answered_even_when_the_gateway_cannot_open(tmp_path: Path) -> None:
    unreachable = config(tmp_path, "postgresql://pml:pml@127.0.0.1:9/nothing")
    argv = [str(PML), "--config", str(unreachable), "serve", "--stdio"]
    answers = await converse(argv, line(initialize("2025-11-25")), 1)
    assert len(answers) == 1
    assert answers[0]["result"]["serverInfo"]["name"] == "pml"


@pytest.mark.parametrize(
    "hostile",
    [
        b"not json at all\n",
        b'{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": "wrong"}\n',
        b'{"jsonrpc": "2.0", "id": true, "method": "initialize", "params": {}}\n',
        line({**initialize("2025-11-25", 9), "params": {"protocolVersion": 5}}),
        line({**discover("2026-07-28", 8), "params": {"_meta": ["x"]}}),
        line({**initialize("2025-11-25", 6), "params": {"protocolVersion": "2025-11-25"}}),
        line(
            {
                **initialize("2025-11-25", 5),
                "params": {**initialize("x")["params"], "capabilities": {"roots": 5}},
            }
        ),
        b'{"jsonrpc": "2.0", "id": "\\u65e5\\u672c", "method": "server/discover"}\n',
        b"\x00\xff\xfe garbage \xf0\x9f\x99\x82\n",
    ],
    ids=[
        "not-json",
        "params-text",
        "id-bool",
        "version-number",
        "meta-list",
        "no-client",
        "capability-number",
        "no-params",
        "bytes",
    ],
)
def test_a_hostile_opening_is_left_to_the_sdk_server(hostile: bytes) -> None:
    assert opening_answer(hostile.rstrip(b"\n")) is None


def test_an_overlong_opening_is_left_to_the_sdk_server() -> None:
    huge = initialize("2025-11-25")
    huge["params"]["clientInfo"]["name"] = "x" * 2_000_000
    assert opening_answer(json.dumps(huge).encode()) is None


async def test_hostile_lines_before_the_opening_change_nothing(tmp_path: Path) -> None:
    payload = (
        b"garbage\n"
        + line({**initialize("2025-11-25", 9), "params": {"protocolVersion": 5}})
        + line(initialize("2025-11-25", 1))
        + line(initialize("2025-11-25", 1))  # the same id again: the SDK answers it
        + line({"jsonrpc": "2.0", "method": "notifications/initialized"})
        + line({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    )
    argv = [str(PML), "--config", str(config(tmp_path)), "serve", "--stdio"]
    answers = await converse(argv, payload, 5)
    by_id: dict[Any, list[dict[str, Any]]] = {}
    for answer in answers:
        by_id.setdefault(answer.get("id"), []).append(answer)
    assert len(by_id[1]) == 2  # one early, one from the SDK for the repeated request
    assert by_id[2] == [{"jsonrpc": "2.0", "id": 2, "result": {}}]
    assert "error" in by_id[9][0]
    assert by_id[None][0]["error"]["code"] == -32700  # the garbage line: a parse error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_works_through_the_early_answer(tmp_path: Path, mode: Any) -> None:
    params = StdioServerParameters(
        command=str(PML), args=["--config", str(config(tmp_path)), "serve", "--stdio"]
    )
    with anyio.fail_after(WAIT_S):
        async with Client(params, mode=mode) as client:
            tools = await client.list_tools()
            result = await client.call_tool("cap_list", {})
    assert "pml_discover" in [tool.name for tool in tools.tools]
    assert not result.is_error
