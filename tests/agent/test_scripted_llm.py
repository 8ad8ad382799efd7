"""The scripted OpenAI-compatible endpoint itself: what it sends for each kind of step.

Driven with plain httpx over loopback, so a fault in the stand-in cannot hide behind a fault
in ``OpenAiChat`` (tested in test_chat_client.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agent.scripted_llm import ScriptedLlm

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("scripted_llm.py")


async def post(llm: ScriptedLlm, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        return await client.post(f"{llm.base_url}/chat/completions", json=body)


def sse_chunks(text: str) -> list[Any]:
    """The data of each event ("[DONE]" kept as text), checking events end with a blank line."""
    assert text.endswith("\n\n")
    events = text.split("\n\n")[:-1]
    data = [event.removeprefix("data: ") for event in events]
    assert all(event.startswith("data: ") for event in events)
    return [item if item == "[DONE]" else json.loads(item) for item in data]


async def test_a_stream_request_gets_content_a_few_characters_a_chunk() -> None:
    with ScriptedLlm([{"content": "Hello, world!"}]) as llm:
        response = await post(llm, {"model": "m", "messages": [], "stream": True})

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks = sse_chunks(response.text)
    assert chunks[-1] == "[DONE]"
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [delta["content"] for delta in deltas[1:-1]] == ["Hell", "o, w", "orld", "!"]
    assert deltas[-1] == {}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks[:-1])


async def test_without_stream_the_answer_is_one_json_completion() -> None:
    with ScriptedLlm([{"content": "plain"}]) as llm:
        response = await post(llm, {"model": "m", "messages": []})

    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "plain"}
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_tool_calls_stream_as_a_head_then_argument_fragments() -> None:
    step = {"tool_calls": [{"name": "read", "arguments": {"path": "/tmp/a"}, "id": "c1"}]}
    with ScriptedLlm([step]) as llm:
        response = await post(llm, {"model": "m", "messages": [], "stream": True})

    chunks = sse_chunks(response.text)
    fragments = [
        chunk["choices"][0]["delta"]["tool_calls"][0]
        for chunk in chunks[:-1]
        if "tool_calls" in chunk["choices"][0]["delta"]
    ]
    assert fragments[0] == {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "read", "arguments": ""},
    }
    assert len(fragments) > 2
    assert all(set(fragment) == {"index", "function"} for fragment in fragments[1:])
    arguments = "".join(fragment["function"]["arguments"] for fragment in fragments)
    assert json.loads(arguments) == {"path": "/tmp/a"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_calls_without_stream_are_in_the_message() -> None:
    step = {"tool_calls": [{"name": "t", "arguments": "not json", "id": None}], "content": "hm"}
    with ScriptedLlm([step]) as llm:
        response = await post(llm, {"model": "m", "messages": [], "stream": False})

    message = response.json()["choices"][0]["message"]
    assert message["content"] == "hm"
    assert message["tool_calls"] == [
        {"type": "function", "function": {"name": "t", "arguments": "not json"}}
    ]


async def test_requests_and_headers_are_recorded_and_the_script_runs_out() -> None:
    seen: list[Any] = []

    def by_request(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body["tools"])
        return {"content": f"{len(body['tools'])} tools"}

    with ScriptedLlm([by_request]) as llm:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            url = f"{llm.base_url}/chat/completions"
            first = await client.post(
                url, json={"model": "m", "tools": [1, 2]}, headers={"Authorization": "Bearer k"}
            )
            second = await client.post(url, json={"model": "m", "n": 2})

    assert first.json()["choices"][0]["message"]["content"] == "2 tools"
    assert second.json()["choices"][0]["message"]["content"] == "(script exhausted)"
    assert seen == [[1, 2]]
    assert llm.requests == [{"model": "m", "tools": [1, 2]}, {"model": "m", "n": 2}]
    assert llm.headers[0]["authorization"] == "Bearer k"
    assert "authorization" not in llm.headers[1]
    assert llm.exhausted == 1


async def test_router_requests_are_answered_apart_from_the_steps() -> None:
    router_answer = {"intent": "chat", "confidence": 0.9}
    with ScriptedLlm([{"content": "executor"}], router=lambda body: router_answer) as llm:
        routed = await post(llm, {"model": "m", "response_format": {"type": "json_schema"}})
        executed = await post(llm, {"model": "m", "stream": False})

    content = routed.json()["choices"][0]["message"]["content"]
    assert json.loads(content) == router_answer
    assert executed.json()["choices"][0]["message"]["content"] == "executor"
    assert [body["model"] for body in llm.router_requests] == ["m"]
    assert llm.requests == [{"model": "m", "stream": False}]


async def test_a_router_that_declines_answers_503() -> None:
    with ScriptedLlm([], router=lambda body: None) as llm:
        response = await post(llm, {"model": "m", "response_format": {}})

    assert response.status_code == 503
    assert llm.exhausted == 0


async def test_status_body_and_raw_steps_are_sent_as_given() -> None:
    script = [
        {"status": 500, "body": {"error": {"message": "boom"}}},
        {"raw": "data: {garbage\n\n", "status": 200},
        {"body": {"not": "a completion"}},
    ]
    with ScriptedLlm(script) as llm:
        failed = await post(llm, {"stream": True})
        raw = await post(llm, {"stream": True})
        odd = await post(llm, {})

    assert (failed.status_code, failed.json()) == (500, {"error": {"message": "boom"}})
    assert raw.text == "data: {garbage\n\n"
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert odd.json() == {"not": "a completion"}


async def test_a_callable_step_that_fails_answers_500_and_is_reported() -> None:
    with ScriptedLlm([lambda body: body["missing"]]) as llm:
        response = await post(llm, {})

    assert response.status_code == 500
    assert "KeyError" in llm.errors[0]


async def test_a_body_that_is_not_json_is_refused() -> None:
    with ScriptedLlm([{"content": "x"}]) as llm:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            response = await client.post(f"{llm.base_url}/chat/completions", content=b"[" * 5000)

    assert response.status_code == 400
    assert llm.requests == []


def test_unknown_step_keys_are_refused_when_the_script_is_given() -> None:
    with pytest.raises(ValueError, match="unknown step keys"):
        ScriptedLlm([{"contents": "typo"}])
    with pytest.raises(ValueError, match="tool_calls"):
        ScriptedLlm([{"tool_calls": [{"arguments": {}}]}])


async def test_a_delayed_answer_does_not_hold_the_server_at_exit() -> None:
    started = time.monotonic()
    with ScriptedLlm([{"content": "slow", "delay_s": 60}]) as llm:
        with anyio.move_on_after(0.3):
            await post(llm, {"stream": False})
    assert time.monotonic() - started < 5


def test_the_process_form_serves_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"steps": [{"content": "from a file"}], "router": {"intent": "chat"}})
    )
    port_file = tmp_path / "port"
    requests_file = tmp_path / "requests.jsonl"
    command = [sys.executable, str(SERVER), "--script", str(script), "--port-file", str(port_file)]
    process = subprocess.Popen([*command, "--requests-file", str(requests_file)])
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert process.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "no port file"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{int(port_file.read_text())}/v1/chat/completions"
        with httpx.Client(trust_env=False, timeout=10) as client:
            routed = client.post(url, json={"response_format": {}})
            answered = client.post(url, json={"model": "m"})
    finally:
        process.terminate()
        process.wait(10)

    assert json.loads(routed.json()["choices"][0]["message"]["content"]) == {"intent": "chat"}
    assert answered.json()["choices"][0]["message"]["content"] == "from a file"
    lines = requests_file.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"response_format": {}}, {"model": "m"}]
