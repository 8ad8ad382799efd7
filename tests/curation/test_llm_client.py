"""``pml.llm.LlmClient`` against a local HTTP stand-in for an OpenAI-compatible endpoint.

No real LLM is reachable from the test machines, so ``LlmStub`` (a real HTTP server on
127.0.0.1) answers ``POST /v1/chat/completions`` the way such endpoints do, and misbehaves
the ways they can.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from curation.llm_stub import LlmStub, completion
from pml.errors import UpstreamUnavailable
from pml.llm import LlmClient, llm_api_key, llm_client, open_llm
from pml.sections import LlmSettings

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture
def stub() -> Iterator[LlmStub]:
    with LlmStub() as server:
        yield server


def client_for(stub: LlmStub, **options: Any) -> LlmClient:
    settings: dict[str, Any] = {"model": "small-model", "timeout_s": 5.0, **options}
    return LlmClient(base_url=stub.base_url, **settings)


async def ask(client: LlmClient) -> dict[str, Any]:
    async with client:
        return await client.complete_json("system text", "user text", "answer", SCHEMA)


async def test_a_structured_answer_is_returned_as_a_dict(stub: LlmStub) -> None:
    stub.reply = lambda body: (200, completion('{"ok": true}'))

    answer = await ask(client_for(stub, api_key=SECRET))

    assert answer == {"ok": True}
    (body,) = stub.requests
    assert body["model"] == "small-model"
    assert body["messages"] == [
        {"role": "system", "content": "system text"},
        {"role": "user", "content": "user text"},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
    }
    assert stub.headers[0]["authorization"] == f"Bearer {SECRET}"


async def test_without_a_key_no_authorization_header_is_sent(stub: LlmStub) -> None:
    stub.reply = lambda body: (200, completion('{"ok": true}'))

    await ask(client_for(stub))

    assert "authorization" not in stub.headers[0]


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"ok": true}\n```',
        '  \n{"ok": true}\n ',
        '```\n{"ok": true}\n```',
    ],
)
async def test_plain_or_fenced_json_content_is_accepted(stub: LlmStub, content: str) -> None:
    stub.reply = lambda body: (200, completion(content))

    assert await ask(client_for(stub)) == {"ok": True}


async def test_content_parts_are_joined(stub: LlmStub) -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": '{"ok": '},
                                                {"type": "text", "text": "false}"}]}  # fmt: skip
    stub.reply = lambda body: (200, json.dumps({"choices": [{"message": message}]}).encode())

    assert await ask(client_for(stub)) == {"ok": False}


async def test_an_endpoint_without_structured_outputs_is_asked_again_without_them(
    stub: LlmStub,
) -> None:
    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        if "response_format" in body:
            return 400, b'{"error": {"message": "response_format is not supported"}}'
        return 200, completion('{"ok": true}')

    stub.reply = reply

    assert await ask(client_for(stub)) == {"ok": True}
    assert ["response_format" in body for body in stub.requests] == [True, False]


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (500, b'{"error": {"message": "model overloaded"}}', "HTTP 500: model overloaded"),
        (401, b'{"error": "invalid api key"}', "HTTP 401: invalid api key"),
        (503, b"<html>busy</html>", "HTTP 503"),
        (200, b"not json at all", "not JSON"),
        (200, b'{"choices": []}', "not a chat completion"),
        (200, b'{"choices": [{"message": "hi"}]}', "not a chat completion"),
        (200, completion("Sure! Here are your names: fs:read"), "LLM answer is not JSON"),
        (200, completion('["a", "b"]'), "not a JSON object"),
        (200, completion("[" * 100_000), "LLM answer is not JSON"),
        (200, json.dumps({"choices": [{"message": {"content": None}}]}).encode(), "no text"),
        (
            200,
            json.dumps({"choices": [{"message": {"content": None, "refusal": "no way"}}]}).encode(),
            "LLM refused: no way",
        ),
    ],
)
async def test_every_bad_answer_is_upstream_unavailable(
    stub: LlmStub, status: int, payload: bytes, message: str
) -> None:
    stub.reply = lambda body: (status, payload)

    with pytest.raises(UpstreamUnavailable) as caught:
        await ask(client_for(stub, api_key=SECRET))

    assert message in caught.value.message
    assert caught.value.data == {"server": "llm"}
    assert SECRET not in caught.value.message


async def test_an_answer_over_the_size_limit_is_refused(stub: LlmStub) -> None:
    stub.reply = lambda body: (200, completion('{"ok": "' + "x" * 5000 + '"}'))

    with pytest.raises(UpstreamUnavailable, match="exceeds 1000 bytes"):
        await ask(client_for(stub, max_answer_bytes=1000))


async def test_a_slow_endpoint_times_out(stub: LlmStub) -> None:
    stub.hang = True

    with pytest.raises(UpstreamUnavailable, match=r"did not answer within 0\.5 s"):
        await ask(client_for(stub, timeout_s=0.5))


async def test_an_unreachable_endpoint_is_upstream_unavailable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = LlmClient(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5)

    with pytest.raises(UpstreamUnavailable, match="unreachable: ConnectError"):
        await ask(client)


def test_the_key_is_read_from_the_named_variable_of_the_given_environment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = LlmSettings(base_url="http://127.0.0.1:1/v1", model="m", api_key_env="MY_KEY")

    assert llm_api_key(settings, {"MY_KEY": SECRET}) == SECRET
    with caplog.at_level(logging.WARNING):
        assert llm_api_key(settings, {}) is None
    assert "MY_KEY" in caplog.text
    assert llm_api_key(settings.model_copy(update={"api_key_env": None}), {"X": "y"}) is None


def test_llm_client_is_none_without_an_llm_section() -> None:
    settings = LlmSettings(base_url="http://127.0.0.1:1/v1/", model="m", timeout_s=7)

    assert llm_client(None, {}) is None
    client = llm_client(settings, {})
    assert client is not None
    assert (client.url, client.model) == ("http://127.0.0.1:1/v1/chat/completions", "m")


async def test_open_llm_gives_a_working_client_or_none(stub: LlmStub) -> None:
    stub.reply = lambda body: (200, completion('{"ok": true}'))
    settings = LlmSettings(base_url=stub.base_url, model="m", api_key_env="K")

    async with open_llm(None, api_key=None) as nothing:
        assert nothing is None
    async with open_llm(settings, api_key=SECRET) as client:
        assert client is not None
        assert await client.complete_json("s", "u", "answer", SCHEMA) == {"ok": True}

    assert stub.headers[0]["authorization"] == f"Bearer {SECRET}"
