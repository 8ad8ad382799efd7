"""The executor's model: any OpenAI-compatible ``/chat/completions`` endpoint with tools.

    key = llm_api_key(settings.llm, os.environ)          # at an entry point only
    async with OpenAiChat.from_settings(settings.llm, api_key=key) as model:
        reply = await model.chat(messages, tools=specs, on_text=display.text)
        reply.content, reply.tool_calls, reply.finish_reason

The request asks for a stream (``"stream": true``): the text reaches ``on_text`` piece by
piece as the model writes it, and tool calls are assembled from their fragments
(``pml.agent.chat_stream``). An endpoint that answers one JSON completion instead is read
as such (``on_text`` then gets the whole text once); one that refuses streaming (HTTP
400/422 naming ``stream``) is asked once more without it. The whole exchange is bounded by
``timeout_s`` and ``max_answer_bytes``. Every failure raises ``UpstreamUnavailable``
(server ``"llm"``) with a short message that never holds the API key; cancellation closes
the HTTP response and propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
import httpx

from pml.agent.chat_stream import (
    StreamReader,
    TextSink,
    completion_reply,
    decode_json,
    error_detail,
    unavailable,
)
from pml.agent.model import ChatReply
from pml.errors import UpstreamUnavailable
from pml.llm import PooledHttp
from pml.sections import LlmSettings

logger = logging.getLogger(__name__)

MAX_ANSWER_BYTES: Final = 2_000_000
_REFUSED_OPTION: Final = frozenset({400, 422})


class OpenAiChat(PooledHttp):
    """One OpenAI-compatible chat endpoint as the agent's ``ChatModel`` (see module)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_tokens: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url=base_url,
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_answer_bytes=max_answer_bytes,
            transport=transport,
        )
        self._max_tokens = max_tokens

    @classmethod
    def from_settings(
        cls,
        llm: LlmSettings,
        *,
        api_key: str | None,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> OpenAiChat:
        """A model for the ``[llm]`` section (``timeout_s`` overrides its ``timeout_s``)."""
        return cls(
            base_url=llm.base_url,
            model=llm.model,
            api_key=api_key,
            timeout_s=llm.timeout_s if timeout_s is None else timeout_s,
            max_tokens=max_tokens,
        )

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: TextSink | None = None,
    ) -> ChatReply:
        """One round of the model: its text (streamed to ``on_text``) and its tool calls."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            "stream": True,
        }
        if tools:
            body["tools"] = [dict(tool) for tool in tools]
            body["tool_choice"] = "auto"
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        try:
            with anyio.fail_after(self._timeout_s):
                reply = await self._exchange(body, on_text, may_retry=True)
                if reply is None:  # an endpoint that does not stream
                    logger.info("LLM endpoint refused streaming: asking without it")
                    body["stream"] = False
                    reply = await self._exchange(body, on_text, may_retry=False)
        except TimeoutError:
            raise self._unavailable(
                f"LLM endpoint did not answer within {self._timeout_s:g} s"
            ) from None
        except httpx.HTTPError as error:
            raise self._unavailable(f"LLM endpoint unreachable: {type(error).__name__}") from None
        except UpstreamUnavailable as error:
            raise self._unavailable(error.message) from None
        if reply is None:  # unreachable: the second exchange does not ask for a retry
            raise self._unavailable("LLM endpoint refused to answer without streaming")
        return reply

    async def _exchange(
        self, body: dict[str, Any], on_text: TextSink | None, *, may_retry: bool
    ) -> ChatReply | None:
        """The reply to one POST, or None when the endpoint refused ``stream`` (may_retry)."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if body["stream"] else "application/json",
            "Accept-Encoding": "identity",  # the byte bound counts what the server sent
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        client = self._http()
        async with client.stream("POST", self.url, json=body, headers=headers) as response:
            status = response.status_code
            if not 200 <= status < 300:
                raw = await self._read_all(response)
                if self._api_key:  # an endpoint may quote the key it refused
                    raw = raw.replace(self._api_key.encode(), b"***")
                if may_retry and status in _REFUSED_OPTION and b"stream" in raw.lower():
                    return None
                raise unavailable(
                    f"LLM endpoint answered HTTP {status}{error_detail(decode_json(raw))}"
                )
            content_type = response.headers.get("content-type", "").lower()
            if "json" in content_type and "event-stream" not in content_type:
                return completion_reply(await self._read_all(response), on_text)
            return await self._read_stream(response, on_text)

    async def _read_stream(self, response: httpx.Response, on_text: TextSink | None) -> ChatReply:
        reader = StreamReader(on_text)
        start: list[bytes] = []  # what came before the first valid chunk (see below)
        size = 0
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > self._max_answer_bytes:
                raise unavailable(f"LLM answer exceeds {self._max_answer_bytes} bytes")
            if reader.chunks == 0:
                start.append(piece)
            reader.feed(piece)
            if reader.done:
                break
        reader.finish()
        if reader.chunks == 0 and b"".join(start).lstrip().startswith(b"{"):
            # A whole completion under a Content-Type that did not say JSON.
            return completion_reply(b"".join(start), on_text)
        return reader.reply()

    async def _read_all(self, response: httpx.Response) -> bytes:
        pieces: list[bytes] = []
        size = 0
        async for piece in response.aiter_bytes():
            size += len(piece)
            if size > self._max_answer_bytes:
                raise unavailable(f"LLM answer exceeds {self._max_answer_bytes} bytes")
            pieces.append(piece)
        return b"".join(pieces)

    def _unavailable(self, message: str) -> UpstreamUnavailable:
        """The failure, with the key blanked out should the endpoint have echoed it."""
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return unavailable(message)
