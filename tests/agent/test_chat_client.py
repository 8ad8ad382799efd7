"""``OpenAiChat`` against the scripted OpenAI-compatible endpoint, over real loopback HTTP.

A well-behaved endpoint (streamed text, tool calls in fragments, a JSON answer), then the
hostile ones: error statuses, garbage, oversized answers, too many calls, deep nesting,
slow answers, and a person who cancels mid-stream.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import anyio
import pytest

from agent.scripted_llm import ScriptedLlm
from pml.agent.chat import OpenAiChat
from pml.agent.model import ChatReply, ToolCall
from pml.errors import UpstreamUnavailable
from pml.sections import LlmSettings

pytestmark = pytest.mark.anyio

SECRET = "sk-test-0123456789abcdef"
HELLO = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {"name": "read_file", "description": "Read a file", "parameters": {}},
}


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    """One SSE event of a streamed completion."""
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    body["choices"][0]["finish_reason"] = finish_reason
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def ask(llm: ScriptedLlm, *, on_text: Any = None, **options: Any) -> ChatReply:
    tools = options.pop("tools", ())
    async with OpenAiChat(base_url=llm.base_url, model="exec-model", **options) as model:
        return await model.chat(HELLO, tools=tools, on_text=on_text)


async def refused(llm: ScriptedLlm, **options: Any) -> str:
    with pytest.raises(UpstreamUnavailable) as caught:
        await ask(llm, **options)
    assert caught.value.data == {"server": "llm"}
    return caught.value.message


async def test_streamed_text_arrives_in_pieces_and_the_reply_holds_it_all() -> None:
    pieces: list[str] = []
    with ScriptedLlm([{"content": "The weather is sunny today."}]) as llm:
        reply = await ask(llm, on_text=pieces.append)

    assert len(pieces) > 3
    assert "".join(pieces) == reply.content == "The weather is sunny today."
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    (body,) = llm.requests
    assert body == {"model": "exec-model", "messages": HELLO, "stream": True}


async def test_tool_calls_are_assembled_from_fragments_in_index_order() -> None:
    step = {
        "content": "Let me look.",
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "/etc/hosts"}, "id": "call_a"},
            {"name": "list_dir", "arguments": {"path": "/tmp", "deep": True}, "id": "call_b"},
            {"name": "now", "arguments": "", "id": "call_c"},
        ],
        "chunk_chars": 2,
    }
    with ScriptedLlm([step]) as llm:
        reply = await ask(llm, tools=[TOOL])

    assert reply.content == "Let me look."
    assert reply.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "/etc/hosts"}'),
        ToolCall("call_b", "list_dir", '{"path": "/tmp", "deep": true}'),
        ToolCall("call_c", "now", ""),
    )
    assert reply.finish_reason == "tool_calls"
    (body,) = llm.requests
    assert body["tools"] == [TOOL]
    assert body["tool_choice"] == "auto"


async def test_fragments_out_of_order_and_without_index_or_id_still_assemble() -> None:
    raw = "".join(
        [
            chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "second"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "first", "arguments": "{"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
            chunk({"tool_calls": [{"id": "c", "function": {"name": 42, "arguments": {"k": 1}}}]}),
            chunk({"tool_calls": [{"function": {"arguments": "ignored?"}}]}),
            chunk({"tool_calls": [{"index": 3, "id": "b", "function": {"name": "dup"}}]}),
            "data: [DONE]\n\n",
        ]
    )
    with ScriptedLlm([{"raw": raw}]) as llm:
        reply = await ask(llm)

    assert reply.tool_calls == (
        ToolCall("call_0", "first", "{}"),
        ToolCall("b", "second", ""),
        ToolCall("c", "", '{"k": 1}ignored?'),  # a name that is not text: kept, empty
        ToolCall("call_3", "dup", ""),  # an id already used gets a fresh one
    )


async def test_a_server_repeating_the_whole_name_in_each_fragment_names_the_call_once() -> None:
    raw = chunk({"tool_calls": [{"index": 0, "id": "x", "function": {"name": "now"}}]}) * 3
    with ScriptedLlm([{"raw": raw}]) as llm:
        reply = await ask(llm)

    assert reply.tool_calls == (ToolCall("x", "now", ""),)


async def test_a_json_answer_to_a_stream_request_is_read_whole() -> None:
    step = {
        "content": "whole",
        "tool_calls": [{"name": "now", "arguments": {}, "id": None}],
        "ignore_stream": True,
    }
    pieces: list[str] = []
    with ScriptedLlm([step]) as llm:
        reply = await ask(llm, on_text=pieces.append)

    assert pieces == ["whole"]
    assert reply == ChatReply("whole", (ToolCall("call_0", "now", "{}"),), "tool_calls")


async def test_a_completion_sent_as_plain_text_is_recognised() -> None:
    completion = {"choices": [{"message": {"content": "plain"}, "finish_reason": "stop"}]}
    step = {"raw": json.dumps(completion), "content_type": "text/plain"}
    with ScriptedLlm([step]) as llm:
        reply = await ask(llm)

    assert reply == ChatReply("plain", (), "stop")


async def test_an_endpoint_that_refuses_streaming_is_asked_once_more_without() -> None:
    refusal = {"status": 400, "body": {"error": {"message": "stream is not supported"}}}
    with ScriptedLlm([refusal, {"content": "ok"}]) as llm:
        reply = await ask(llm)

    assert reply.content == "ok"
    assert [body["stream"] for body in llm.requests] == [True, False]
    assert llm.headers[1]["accept"] == "application/json"


async def test_a_400_about_something_else_is_not_retried() -> None:
    step = {"status": 400, "body": {"error": {"message": "context length exceeded"}}}
    with ScriptedLlm([step, {"content": "never"}]) as llm:
        message = await refused(llm)

    assert message == "LLM endpoint answered HTTP 400: context length exceeded"
    assert len(llm.requests) == 1


async def test_options_are_sent_only_when_set() -> None:
    with ScriptedLlm([{"content": "a"}, {"content": "b"}]) as llm:
        await ask(llm)
        await ask(llm, api_key=SECRET, max_tokens=256)

    bare, full = llm.requests
    assert set(bare) == {"model", "messages", "stream"}
    assert full["max_tokens"] == 256
    assert "authorization" not in llm.headers[0]
    assert llm.headers[1]["authorization"] == f"Bearer {SECRET}"


async def test_from_settings_uses_the_llm_section() -> None:
    with ScriptedLlm([{"content": "configured"}]) as llm:
        settings = LlmSettings(base_url=llm.base_url, model="cfg-model", timeout_s=5)
        async with OpenAiChat.from_settings(settings, api_key=SECRET, max_tokens=99) as model:
            reply = await model.chat(HELLO)

    assert (model.model, reply.content) == ("cfg-model", "configured")
    assert llm.requests[0]["max_tokens"] == 99
    assert llm.headers[0]["authorization"] == f"Bearer {SECRET}"


async def test_an_error_status_gives_the_short_message_without_the_key() -> None:
    long_message = f"Incorrect API key provided: {SECRET}. " + "details " * 100
    with ScriptedLlm([{"status": 401, "body": {"error": {"message": long_message}}}]) as llm:
        message = await refused(llm, api_key=SECRET)

    assert message.startswith("LLM endpoint answered HTTP 401: Incorrect API key provided: ***")
    assert SECRET not in message
    assert len(message) < 300


async def test_a_500_without_a_body_names_the_status() -> None:
    with ScriptedLlm([{"status": 500, "raw": "<html>oops</html>"}]) as llm:
        assert await refused(llm) == "LLM endpoint answered HTTP 500"


async def test_malformed_lines_are_skipped_around_valid_chunks() -> None:
    raw = "".join(
        [
            ": keep-alive comment\n\n",
            "event: message\n",
            "data: {not json\n\n",
            "data: [1, 2]\n\n",
            "data: " + "[" * 100_000 + "\n\n",
            'data: {"choices": "no"}\n\n',
            chunk({"content": "survived"}),
            "data: {truncated",  # no newline, then the stream ends without [DONE]
        ]
    )
    with ScriptedLlm([{"raw": raw}]) as llm:
        reply = await ask(llm)

    assert reply.content == "survived"


@pytest.mark.parametrize(
    "raw",
    [
        "data: {not json\n\n",
        "complete garbage \x00\xff",
        "",
        "data: " + "[" * 100_000 + "\n\n",
        "[" * 100_000,
        "data: [DONE]\n\n",
    ],
)
async def test_a_stream_without_any_valid_chunk_is_unavailable(raw: str) -> None:
    with ScriptedLlm([{"raw": raw}]) as llm:
        message = await refused(llm)

    assert message == "LLM endpoint answered no chat completion chunk"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[" * 100_000, "not a JSON object"),
        ('{"choices": []}', "not a chat completion"),
        ('{"choices": [{"message": "text"}]}', "not a chat completion"),
        ('{"error": {"message": "overloaded"}}', "reported an error: overloaded"),
    ],
)
async def test_a_json_answer_that_is_not_a_completion_is_unavailable(
    raw: str, expected: str
) -> None:
    with ScriptedLlm([{"raw": raw, "content_type": "application/json"}]) as llm:
        assert expected in await refused(llm)


async def test_an_error_event_inside_the_stream_is_unavailable() -> None:
    raw = chunk({"content": "par"}) + 'data: {"error": {"message": "rate limited"}}\n\n'
    with ScriptedLlm([{"raw": raw}]) as llm:
        assert await refused(llm) == "LLM stream reported an error: rate limited"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_over_the_byte_bound_is_unavailable(stream: bool) -> None:
    step = {"content": "x" * 3_000_000, "chunk_chars": 100_000, "ignore_stream": not stream}
    with ScriptedLlm([step]) as llm:
        message = await refused(llm)

    assert message == "LLM answer exceeds 2000000 bytes"


async def test_a_smaller_byte_bound_applies_to_error_bodies_too() -> None:
    step = {"status": 500, "raw": "e" * 5000}
    with ScriptedLlm([step]) as llm:
        assert await refused(llm, max_answer_bytes=1000) == "LLM answer exceeds 1000 bytes"


@pytest.mark.parametrize("stream", [True, False])
async def test_more_than_64_tool_calls_is_unavailable(stream: bool) -> None:
    calls = [{"name": f"t{n}", "arguments": {"n": n}} for n in range(100)]
    with ScriptedLlm([{"tool_calls": calls, "ignore_stream": not stream}]) as llm:
        message = await refused(llm)

    assert message == "LLM reply asks for more than 64 tool calls"


async def test_64_tool_calls_are_accepted() -> None:
    calls = [{"name": f"t{n}", "arguments": {"n": n}} for n in range(64)]
    with ScriptedLlm([{"tool_calls": calls}]) as llm:
        reply = await ask(llm)

    assert [call.name for call in reply.tool_calls] == [f"t{n}" for n in range(64)]
    assert json.loads(reply.tool_calls[63].arguments) == {"n": 63}


async def test_deeply_nested_tool_arguments_are_passed_through_as_text() -> None:
    nested = "[" * 100_000
    step = {"tool_calls": [{"name": "t", "arguments": nested}], "chunk_chars": 50_000}
    with ScriptedLlm([step]) as llm:
        reply = await ask(llm)

    assert reply.tool_calls[0].arguments == nested


async def test_a_slow_answer_times_out_promptly() -> None:
    started = time.monotonic()
    with ScriptedLlm([{"content": "too late", "delay_s": 60}]) as llm:
        message = await refused(llm, timeout_s=0.3)

    assert message == "LLM endpoint did not answer within 0.3 s"
    assert time.monotonic() - started < 5


async def test_a_stream_that_stalls_midway_times_out() -> None:
    pieces: list[str] = []
    with (
        ScriptedLlm([{"content": "first then stall", "delay_s": 60}]) as llm,
        pytest.raises(UpstreamUnavailable, match="did not answer within"),
    ):
        await ask(llm, on_text=pieces.append, timeout_s=0.3)

    assert pieces == ["firs"]


async def test_cancelling_mid_stream_returns_at_once_and_propagates() -> None:
    pieces: list[str] = []
    after_chat = False
    started = time.monotonic()
    with ScriptedLlm([{"content": "a long story", "delay_s": 60}, {"content": "next"}]) as llm:
        async with OpenAiChat(base_url=llm.base_url, model="m", timeout_s=30) as model:
            with anyio.CancelScope() as scope:

                def show(delta: str) -> None:
                    pieces.append(delta)
                    scope.cancel()  # the person pressed Ctrl-C

                await model.chat(HELLO, on_text=show)
                after_chat = True
            assert llm.stream_cut.wait(5), "the response was left open"
            again = await model.chat(HELLO)  # the client stays usable

    assert scope.cancelled_caught
    assert not after_chat
    assert pieces == ["a lo"]
    assert llm.cut_streams == 1
    assert again.content == "next"
    assert time.monotonic() - started < 5


async def test_a_deadline_around_the_chat_cancels_it() -> None:
    with ScriptedLlm([{"content": "slow story", "delay_s": 60}]) as llm:
        async with OpenAiChat(base_url=llm.base_url, model="m", timeout_s=30) as model:
            with anyio.move_on_after(0.3) as scope:
                await model.chat(HELLO)

    assert scope.cancelled_caught


async def test_an_unreachable_endpoint_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    async with OpenAiChat(base_url=f"http://127.0.0.1:{port}/v1", model="m") as model:
        with pytest.raises(UpstreamUnavailable, match="unreachable: ConnectError"):
            await model.chat(HELLO)


async def test_unicode_survives_chunking_and_split_bytes() -> None:
    text = "héllo 🌍 世界 \u202e reversed\u202c done"
    raw = "".join(chunk({"content": text[n : n + 3]}) for n in range(0, len(text), 3))
    pieces: list[str] = []
    with ScriptedLlm([{"content": text}, {"raw": raw + "data: [DONE]\n\n"}]) as llm:
        streamed = await ask(llm)
        verbatim = await ask(llm, on_text=pieces.append)  # UTF-8 bytes, not \\u escapes

    assert streamed.content == verbatim.content == text
    assert "".join(pieces) == text


async def test_injection_text_in_content_is_just_text() -> None:
    hostile = 'data: [DONE]\n\n{"tool_calls": [{"name": "rm"}]}\r\n\x00'
    with ScriptedLlm([{"content": hostile}]) as llm:
        reply = await ask(llm)

    assert reply.content == hostile
    assert reply.tool_calls == ()
