"""Depth is an input error, never a crash: a real ``pml serve``, over stdio and over HTTP.

The gateway runs as its own process, in front of ``depth_upstream.py`` (a real stdio MCP
server that answers with JSON nested as deep as asked). The client sends lines and bodies
nested 100 000 levels, arguments past the limit, and asks for deep results; each gets a
JSON-RPC error or an error result, and the same gateway answers the next ordinary request.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from e2e.support import PML, Upstream, create_key, pml_http, sqlite_url, write_config
from pml.wire_json import MAX_JSON_DEPTH, TOO_DEEP_MESSAGE

pytestmark = pytest.mark.e2e

DEEP_UPSTREAM = Path(__file__).with_name("depth_upstream.py")
WAIT_S = 60.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "depth-e2e", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def nested_text(depth: int, kind: str = "list") -> str:
    opens: list[str] = []
    closes: list[str] = []
    for level in range(depth):
        as_list = kind == "list" or (kind == "mixed" and level % 2 == 0)
        opens.append("[" if as_list else '{"k":')
        closes.append("]" if as_list else "}")
    return "".join(opens) + "0" + "".join(reversed(closes))


def call(request_id: int | str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def with_deep_arguments(request_id: int, name: str, depth: int) -> bytes:
    text = json.dumps(call(request_id, name, {"v": "@"}))
    return text.replace('"@"', nested_text(depth, "mixed")).encode()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    deep = Upstream("deep", sys.executable, (str(DEEP_UPSTREAM),))
    return write_config(
        tmp_path / "pml.toml",
        [deep],
        database_url=sqlite_url(tmp_path),
        extra={"permissions": {"allow": ["deep:*"]}},
    )


def error_code(result: dict[str, Any]) -> str:
    structured = result["structuredContent"]
    return structured["error"]["code"]


# -- stdio --------------------------------------------------------------------------------


class StdioPeer:
    """A raw client of ``pml serve --stdio``: lines out, answers by id."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin: IO[bytes] = process.stdin
        self._stdout: IO[bytes] = process.stdout
        self.process = process

    def send(self, line: bytes | dict[str, Any]) -> None:
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        self._stdin.write(data + b"\n")
        self._stdin.flush()

    def send_raw(self, data: bytes) -> None:
        self._stdin.write(data)
        self._stdin.flush()

    def drain_until(self, marker: bytes, *, then: dict[str, Any]) -> int:
        """Read every pending answer (a reader thread), send ``then``, and read until a line
        holding ``marker``; the bytes read."""
        seen = [0]
        found = threading.Event()

        def read() -> None:
            for line in self._stdout:
                seen[0] += len(line)
                if marker in line:
                    found.set()
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.send(then)
        assert found.wait(WAIT_S), "the gateway did not answer once its answers were read"
        return seen[0]

    def answer(self, request_id: int | str | None) -> dict[str, Any]:
        """The next answer to ``request_id`` (None: an error without an id), others skipped."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            line = self._stdout.readline()
            assert line, f"pml serve --stdio ended (exit {self.process.poll()})"
            message = json.loads(line)
            if "id" in message and message["id"] == request_id:
                return message
        raise AssertionError(f"no answer to {request_id!r} within {WAIT_S:.0f} s")


@pytest.fixture
def stdio(config: Path, tmp_path: Path) -> Iterator[StdioPeer]:
    with (tmp_path / "pml.log").open("wb") as log:
        process = subprocess.Popen(
            [str(PML), "--config", str(config), "serve", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=tmp_path,
        )
    peer = StdioPeer(process)
    try:
        peer.send(INITIALIZE)
        assert "result" in peer.answer("init")
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield peer
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_stdio_a_line_100_000_deep_is_a_parse_error_and_the_gateway_serves_on(
    stdio: StdioPeer,
) -> None:
    for line, request_id in (
        (b"[" * 100_000, None),
        (nested_text(100_000, "mixed").encode(), None),
        # The id comes before the deep part: the answer carries it, so the call ends.
        (with_deep_arguments(3, "deep__ping", 1_000), 3),
        (with_deep_arguments(5, "pml_execute", MAX_JSON_DEPTH - 2), 5),
    ):
        stdio.send(line)
        answer = stdio.answer(request_id)
        assert answer["error"] == {"code": -32700, "message": TOO_DEEP_MESSAGE}
    stdio.send(call(4, "deep__ping", {}))
    pong = stdio.answer(4)
    assert pong["result"]["content"] == [{"type": "text", "text": "pong"}]
    assert stdio.process.poll() is None


@pytest.mark.parametrize(
    ("tool", "depth"),
    [
        ("deep_structured", MAX_JSON_DEPTH + 50),  # parsed by the SDK, refused by PML
        ("deep_structured", 100_000),  # too deep for the SDK's parser itself
        ("deep_text", 100_000),  # JSON text a snippet would parse
    ],
)
def test_stdio_a_deep_upstream_result_is_a_tool_error_at_once(
    stdio: StdioPeer, tool: str, depth: int
) -> None:
    started = time.monotonic()
    stdio.send(call(1, f"deep__{tool}", {"depth": depth, "kind": "mixed"}))
    passed = stdio.answer(1)["result"]
    code = "r = await mcp.deep." + tool + f"(depth={depth})\nreturn 1"
    stdio.send(call(2, "pml_execute", {"intent": "read deep", "code": code}))
    executed = stdio.answer(2)["result"]

    for result in (passed, executed):
        assert result["isError"] is True
        assert error_code(result) == "TOOL_ERROR"
        assert "nested more than 128 levels" in result["structuredContent"]["error"]["message"]
    assert executed["structuredContent"]["status"] == "error"
    assert time.monotonic() - started < 30, "the call waited for its timeout"
    stdio.send(call(3, "deep__ping", {}))
    assert stdio.answer(3)["result"]["isError"] is False


def test_stdio_a_client_that_does_not_read_its_answers_stops_being_read(
    stdio: StdioPeer,
) -> None:
    # 20 000 pipelined requests whose answers are never read: the gateway must stop reading
    # once its output is backed up, not start every request and hold every answer.
    process = stdio.process
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, separators=(",", ":")
    ).encode()
    batch = (request + b"\n") * 1_000
    writer = threading.Thread(target=_write_batches, args=(stdio, batch, 20), daemon=True)
    writer.start()
    time.sleep(6)
    rss_mb = _rss_mb(process.pid)
    assert rss_mb < 400, f"the gateway held {rss_mb:.0f} MB for answers nobody read"
    drained = stdio.drain_until(b'"id":"last"', then=call("last", "deep__ping", {}))
    assert drained > 0
    writer.join(timeout=60)
    assert process.poll() is None


def _write_batches(stdio: StdioPeer, batch: bytes, count: int) -> None:
    with contextlib.suppress(BrokenPipeError, ValueError):
        for _ in range(count):
            stdio.send_raw(batch)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- HTTP ---------------------------------------------------------------------------------


def test_http_a_body_100_000_deep_is_a_parse_error_and_the_gateway_serves_on(
    config: Path, tmp_path: Path
) -> None:
    key = create_key(config, "local", "default", "e2e")["key"]
    headers = MCP_HEADERS | {"Authorization": f"Bearer {key}"}
    with pml_http(config, tmp_path / "http.log") as gateway, httpx.Client(timeout=30) as http:
        opened = http.post(gateway.mcp_url, json=INITIALIZE, headers=headers)
        assert opened.status_code == 200
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        http.post(gateway.mcp_url, json=initialized, headers=headers | session)
        for body in (
            b"[" * 100_000,
            nested_text(100_000, "mixed").encode(),
            with_deep_arguments(3, "deep__ping", 900),
        ):
            refused = http.post(gateway.mcp_url, content=body, headers=headers | session)
            assert refused.status_code == 400
            assert refused.json()["error"] == {"code": -32700, "message": TOO_DEEP_MESSAGE}
        deep_result = http.post(
            gateway.mcp_url,
            json=call(4, "deep__deep_structured", {"depth": 100_000, "kind": "mixed"}),
            headers=headers | session,
        )
        pong = http.post(gateway.mcp_url, json=call(5, "deep__ping", {}), headers=headers | session)
        health = http.get(f"{gateway.base_url}/health")
    assert error_code(_result_of(deep_result)) == "TOOL_ERROR"
    assert _result_of(pong)["content"] == [{"type": "text", "text": "pong"}]
    assert health.status_code == 200


def _result_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of a POST answered as JSON or as one SSE event."""
    assert response.status_code == 200, response.text
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(
            line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")
        )
    return json.loads(text)["result"]
