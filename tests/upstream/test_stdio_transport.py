"""PML's stdio transport to upstream servers: linear-time, bounded lines, hostile output,
and no process left behind. Real child processes: the toy server, and a raw server that
writes its own lines (``RAW_SERVER``)."""

from __future__ import annotations

import itertools
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml.config import ServerSettings
from pml.errors import ToolCallError
from pml.upstream.pool import ClientPool
from pml.upstream.stdio_transport import (
    MAX_LINE_BYTES,
    TAIL_BYTES,
    LineSplitter,
    Overlong,
    line_bound,
    stdio_transport,
)
from pml.upstream.transport import StderrTail, inherited_environment, open_client
from pml.wire_ids import HEAD_BYTES
from upstream.helpers import processes_with, text_of, toy, wait_until

pytestmark = pytest.mark.anyio

RAW_SERVER = r"""
import json, os, signal, subprocess, sys, time

out, flags = sys.stdout.buffer, sys.argv[1:]
TOOLS = ["echo", "big", "huge_notification", "huge_request", "noise", "dribble"]

def write(data):
    out.write(data)
    out.flush()

def answer(request_id, result, id_last=False, ending=b"\n"):
    body = {"jsonrpc": "2.0", "id": request_id, "result": result}
    if id_last:  # the TypeScript SDK's order
        body = {"result": result, "jsonrpc": "2.0", "id": request_id}
    return json.dumps(body, ensure_ascii=False).encode() + ending

def text(value):
    return {"content": [{"type": "text", "text": value}]}

def call(rid, name, args):
    size, id_json = int(args.get("size", 0)), json.dumps(rid).encode()
    if name == "echo":
        write(answer(rid, text(args["text"])))
    elif name == "big":  # an answer of `size` bytes of text, built without an encoder
        result = b'{"content": [{"type": "text", "text": "' + b"x" * size + b'"}]}'
        if args.get("id_last"):
            write(b'{"result": ' + result + b', "jsonrpc": "2.0", "id": ' + id_json + b"}\n")
        else:
            write(b'{"jsonrpc": "2.0", "id": ' + id_json + b', "result": ' + result + b"}\n")
    elif name == "huge_notification":  # no id at all, then the real answer
        write(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
              b'{"level": "info", "data": "' + b"y" * size + b'"}}\n')
        write(answer(rid, text("after the notification")))
    elif name == "huge_request":  # a request of the server's, with the call's own id
        write(b'{"jsonrpc": "2.0", "id": ' + id_json + b', "method": "sampling/createMessage", '
              b'"params": {"x": "' + b"z" * size + b'"}}\n')
        write(answer(rid, text("after the request")))
    elif name == "noise":
        write(b"not json at all\n{broken\n\xff\xfe\x00 binary\n\n   \n\r\n[1, 2]\n")
        write(b'{"jsonrpc": "2.0"}\n' + answer(rid, text("after the noise"), ending=b"\r\n"))
    elif name == "dribble":  # one answer in many small writes, characters cut in two
        data = answer(rid, text(args["text"]), id_last=True, ending=b"\r\n")
        for at in range(0, len(data), 3):
            write(data[at : at + 3])
            if at % 48 == 0:
                time.sleep(0.001)  # separate reads on the client's side

if "--ignore-term" in flags:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "--grandchild" in flags:  # a member of the server's process group
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *flags])
for raw in sys.stdin.buffer:
    message = json.loads(raw)
    method, rid = message.get("method"), message.get("id")
    if method == "initialize":
        write(answer(rid, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "raw", "version": "1.0.0"}}))
    elif method == "tools/list":
        write(answer(rid, {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                     for n in TOOLS]}))
    elif method == "tools/call":
        call(rid, message["params"]["name"], message["params"].get("arguments") or {})
    elif rid is not None and method is not None:  # server/discover: a legacy server
        error = {"code": -32601, "message": "Method not found"}
        write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}).encode() + b"\n")
while "--ignore-stdin-close" in flags:
    time.sleep(1)
"""


@pytest.fixture
def raw_server(tmp_path: Path) -> Path:
    path = tmp_path / "raw_server.py"
    path.write_text(RAW_SERVER)
    return path


@asynccontextmanager
async def raw_client(
    script: Path, *flags: str, max_line_bytes: int = MAX_LINE_BYTES
) -> AsyncIterator[Client]:
    transport = stdio_transport(
        sys.executable,
        [str(script), *flags],
        env=inherited_environment(),
        max_line_bytes=max_line_bytes,
    )
    async with Client(transport, cache=None) as client:
        yield client


def raw_pool(script: Path) -> ClientPool:
    return ClientPool({"raw": ServerSettings(command=sys.executable, args=[str(script)])})


def only_text(result: types.CallToolResult) -> str:
    assert not result.is_error
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_call_round_trips_any_text_with_the_given_environment_and_directory(
    tmp_path: Path,
) -> None:
    hostile = 'é 𝄞 \u2028 \\" \x00 \r\n end'
    server = toy(env={"TOY_MARK": "m"}, cwd=str(tmp_path))
    async with ClientPool({"toy": server}) as pool:
        assert text_of(await pool.call_tool("toy", "echo", {"text": hostile})) == hostile
        added = await pool.call_tool("toy", "add", {"a": 2, "b": 3})
        seen = await pool.call_tool_raw("toy", "env")
    assert added.structured_content == {"sum": 5}
    environment = seen["content"][0]["text"]
    assert f'"cwd": "{tmp_path}"' in environment
    assert '"TOY_MARK": "m"' in environment


async def test_a_50_mb_answer_is_read_in_linear_time(raw_server: Path) -> None:
    # The SDK's reader took ~18 s here for 50 MB (``buffer + chunk`` per chunk).
    size = 50_000_000
    async with raw_pool(raw_server) as pool:
        with anyio.fail_after(5):
            result = await pool.call_tool_raw("raw", "big", {"size": size})
        assert len(result["content"][0]["text"]) == size
        assert text_of(await pool.call_tool("raw", "echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize("id_last", [False, True], ids=["id-first", "id-last"])
async def test_a_30_mb_answer_over_the_bound_fails_its_call_at_once_and_the_server_serves_on(
    raw_server: Path, id_last: bool
) -> None:
    async with raw_client(raw_server, max_line_bytes=10_000_000) as client:
        started = time.monotonic()
        with anyio.fail_after(3), pytest.raises(MCPError) as refused:
            await client.call_tool("big", {"size": 30_000_000, "id_last": id_last})
        assert time.monotonic() - started < 3
        assert "answer is larger than 10000000 bytes" in refused.value.error.message
        assert only_text(await client.call_tool("echo", {"text": "next"})) == "next"


async def test_an_answer_over_the_default_bound_fails_through_the_pool(raw_server: Path) -> None:
    async with raw_pool(raw_server) as pool:
        with anyio.fail_after(10), pytest.raises(ToolCallError) as refused:
            await pool.call_tool_raw("raw", "big", {"size": MAX_LINE_BYTES + 1, "id_last": True})
        assert f"larger than {MAX_LINE_BYTES} bytes" in refused.value.message
        assert text_of(await pool.call_tool("raw", "echo", {"text": "next"})) == "next"


@pytest.mark.parametrize("tool", ["huge_notification", "huge_request"])
async def test_a_message_over_the_bound_that_answers_no_call_is_skipped(
    raw_server: Path, tool: str
) -> None:
    # A request of the server's carries an id of its own numbering: never taken as an answer.
    async with raw_client(raw_server, max_line_bytes=1_000_000) as client:
        with anyio.fail_after(5):
            result = await client.call_tool(tool, {"size": 3_000_000})
        assert only_text(result).startswith("after the ")
        assert only_text(await client.call_tool("echo", {"text": "next"})) == "next"


async def test_lines_that_are_not_messages_and_blank_lines_are_skipped(raw_server: Path) -> None:
    async with raw_client(raw_server) as client:
        with anyio.fail_after(5):
            assert only_text(await client.call_tool("noise")) == "after the noise"
            assert only_text(await client.call_tool("echo", {"text": "next"})) == "next"


async def test_an_answer_cut_into_many_writes_with_crlf_and_split_characters_arrives_whole(
    raw_server: Path,
) -> None:
    text = "é𝄞\u2028日本 ok " * 300
    async with raw_client(raw_server) as client:
        with anyio.fail_after(10):
            assert only_text(await client.call_tool("dribble", {"text": text})) == text


@pytest.mark.parametrize(
    "flags",
    [(), ("--ignore-stdin-close", "--grandchild"), ("--ignore-stdin-close", "--ignore-term")],
    ids=["polite", "ignores-stdin-close-with-a-grandchild", "ignores-stdin-close-and-sigterm"],
)
async def test_no_server_process_outlives_the_client(
    raw_server: Path, flags: tuple[str, ...]
) -> None:
    tag = f"--tag={uuid.uuid4().hex}"
    async with raw_client(raw_server, *flags, tag) as client:
        assert only_text(await client.call_tool("echo", {"text": "hi"})) == "hi"
        assert len(processes_with(tag)) == (2 if "--grandchild" in flags else 1)
    # Closing waited for the server (0.5 s of grace, then SIGTERM and at worst SIGKILL 2 s on).
    await wait_until(lambda: processes_with(tag) == [], within=1.0)


async def test_open_client_passes_its_line_bound_to_the_stdio_transport(raw_server: Path) -> None:
    target = ServerSettings(command=sys.executable, args=[str(raw_server)])

    async def ignore(message: object) -> None:
        pass

    async with AsyncExitStack() as stack:
        client = await open_client(
            stack,
            target,
            on_message=ignore,
            on_closed=lambda: None,
            stderr=StderrTail("raw"),
            max_line_bytes=1_000_000,
        )
        with anyio.fail_after(5), pytest.raises(MCPError, match="larger than 1000000 bytes"):
            await client.call_tool("big", {"size": 2_000_000})
        assert only_text(await client.call_tool("echo", {"text": "next"})) == "next"


def test_a_larger_result_limit_gets_a_larger_line_bound() -> None:
    assert line_bound(10_000_000) == MAX_LINE_BYTES  # the default limit fits in the default
    assert line_bound(50_000_000) > 6 * 50_000_000


async def test_a_server_that_cannot_start_raises_at_once(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        async with stdio_transport(str(tmp_path / "missing"), env=inherited_environment()):
            pass


@given(
    lines=st.lists(
        st.tuples(st.binary(max_size=12).filter(lambda b: b"\n" not in b), st.integers(1, 400)),
        max_size=8,
    ),
    bound=st.integers(1, 3000),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_the_splitter_gives_each_line_once_whatever_the_chunks(
    lines: list[tuple[bytes, int]], bound: int, cuts: list[int]
) -> None:
    texts = [piece * times for piece, times in lines]
    stream = b"".join(text + b"\n" for text in texts) + b"unfinished"
    splitter = LineSplitter(bound)
    got: list[bytes | Overlong] = []
    edges = [0, *sorted(min(cut, len(stream)) for cut in cuts), len(stream)]
    for start, end in itertools.pairwise(edges):
        got.extend(splitter.feed(stream[start:end]))
    expected = [
        text if len(text) <= bound else Overlong(text[:HEAD_BYTES], text[-TAIL_BYTES:], len(text))
        for text in texts
    ]
    assert got == expected
