"""A small client for OpenAI-compatible chat endpoints that answer with one JSON object.

    key = llm_api_key(settings.llm, os.environ)       # at an entry point only
    async with open_llm(settings.llm, api_key=key) as client:     # None without [llm]
        answer = await client.complete_json(
            "You name things.", "Name this: ...", "names", {"type": "object", ...}
        )                                             # a dict, or UPSTREAM_UNAVAILABLE

The request asks for a structured answer (``response_format`` of type ``json_schema``); an
endpoint that refuses that option (HTTP 400/422) is asked once more without it, and an
answer whose content is plain JSON (even inside a Markdown code fence) is accepted too.
Every failure (timeout, network, HTTP status, refusal, an answer that is not one JSON
object, an answer over ``max_answer_bytes``) raises ``UpstreamUnavailable``: callers catch
``PmlError`` and fall back. The API key is passed in as a value; only entry points read the
environment (``llm_client``), and the key never appears in messages or logs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, cast

import anyio

from pml.errors import UpstreamUnavailable
from pml.sections import LlmSettings

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

MAX_ANSWER_BYTES: Final = 1_000_000
_SHOWN: Final = 200
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(?P<body>.*)\n\s*```$", re.DOTALL)
_REFUSED_OPTION = frozenset({400, 422})


class JsonCompleter(Protocol):
    """What asks a model for a JSON object (``LlmClient``, or a stand-in in tests)."""

    async def complete_json(
        self, system: str, user: str, schema_name: str, json_schema: Mapping[str, Any]
    ) -> dict[str, Any]: ...


class PooledHttp:
    """One OpenAI-compatible ``/chat/completions`` endpoint over one lazily opened HTTP
    client (no environment, no redirects), closed by ``aclose``; a context manager."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_answer_bytes: int,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._max_answer_bytes = max_answer_bytes
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx  # here: importing httpx loads its CLI too (rich, pygments, click)

            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout_s),
                transport=self._transport,
                follow_redirects=False,
                trust_env=False,  # core code never reads the environment (proxies included)
            )
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections (the client can be used again afterwards)."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class LlmClient(PooledHttp):
    """Structured JSON answers from one OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 20.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
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

    @classmethod
    def from_settings(cls, settings: LlmSettings, *, api_key: str | None) -> LlmClient:
        """A client for the ``[llm]`` section and the key its ``api_key_env`` names."""
        return cls(
            base_url=settings.base_url,
            model=settings.model,
            api_key=api_key,
            timeout_s=settings.timeout_s,
        )

    async def complete_json(
        self, system: str, user: str, schema_name: str, json_schema: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The model's answer to ``system`` + ``user`` as a JSON object (see module)."""
        import httpx

        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(json_schema), "strict": True},
            },
        }
        try:
            with anyio.fail_after(self._timeout_s):
                status, raw = await self._post(body)
                if status in _REFUSED_OPTION:  # an endpoint without structured outputs
                    logger.info("LLM endpoint refused response_format (HTTP %d): retrying", status)
                    body.pop("response_format")
                    status, raw = await self._post(body)
        except TimeoutError:
            raise _unavailable(
                f"LLM endpoint did not answer within {self._timeout_s:g} s"
            ) from None
        except httpx.HTTPError as error:
            raise _unavailable(f"LLM endpoint unreachable: {type(error).__name__}") from None
        if not 200 <= status < 300:
            raise _unavailable(f"LLM endpoint answered HTTP {status}{_error_detail(raw)}")
        return _answer_object(raw)

    async def _post(self, body: dict[str, Any]) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        client = self._http()
        async with client.stream("POST", self.url, json=body, headers=headers) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max_answer_bytes:
                    raise _unavailable(f"LLM answer exceeds {self._max_answer_bytes} bytes")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)


def llm_api_key(settings: LlmSettings | None, environ: Mapping[str, str]) -> str | None:
    """The key ``settings.api_key_env`` names in ``environ`` (None if unnamed or unset)."""
    if settings is None or settings.api_key_env is None:
        return None
    key = environ.get(settings.api_key_env)
    if not key:
        logger.warning(
            "[llm] api_key_env names %s, which is not set: calling the endpoint without a key",
            settings.api_key_env,
        )
        return None
    return key


def llm_client(settings: LlmSettings | None, environ: Mapping[str, str]) -> LlmClient | None:
    """The configured client (entry points only: they pass the environment), or None."""
    if settings is None:
        return None
    return LlmClient.from_settings(settings, api_key=llm_api_key(settings, environ))


@asynccontextmanager
async def open_llm(
    settings: LlmSettings | None, *, api_key: str | None
) -> AsyncGenerator[LlmClient | None]:
    """The configured client for the block, closed on exit (None without ``[llm]``)."""
    if settings is None:
        yield None
        return
    async with LlmClient.from_settings(settings, api_key=api_key) as client:
        yield client


def _unavailable(message: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(message, server="llm")


def _answer_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in a chat completion's first message."""
    try:
        data: object = json.loads(raw)
    except (ValueError, RecursionError):
        raise _unavailable("LLM endpoint answered something that is not JSON") from None
    message = _first_message(data)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise _unavailable(f"LLM refused: {short_text(refusal)}")
    content = text_of(message.get("content"))
    if content is None:
        raise _unavailable("LLM answer has no text content")
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced is not None:
        text = fenced.group("body").strip()
    try:
        parsed: object = json.loads(text)
    except (ValueError, RecursionError):
        raise _unavailable(f"LLM answer is not JSON: {short_text(text)!r}") from None
    if not isinstance(parsed, dict):
        raise _unavailable("LLM answer is not a JSON object")
    return cast(dict[str, Any], parsed)


def _first_message(data: object) -> dict[str, Any]:
    choices = cast(dict[str, Any], data).get("choices") if isinstance(data, dict) else None
    if isinstance(choices, list) and choices:
        first = cast(list[object], choices)[0]
        message = cast(dict[str, Any], first).get("message") if isinstance(first, dict) else None
        if isinstance(message, dict):
            return cast(dict[str, Any], message)
    raise _unavailable("LLM answer is not a chat completion (no choices[0].message)")


def text_of(content: object) -> str | None:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            cast(dict[str, Any], part).get("text")
            for part in cast(list[object], content)
            if isinstance(part, dict)
        ]
        texts = [part for part in parts if isinstance(part, str)]
        return "".join(texts) if texts else None
    return None


def _error_detail(raw: bytes) -> str:
    """``: <message>`` from an OpenAI-style error body, if there is one."""
    try:
        data: object = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    error = cast(dict[str, Any], data).get("error") if isinstance(data, dict) else None
    message = cast(dict[str, Any], error).get("message") if isinstance(error, dict) else error
    return f": {short_text(message)}" if isinstance(message, str) and message else ""


def short_text(text: str) -> str:
    """At most 200 printable characters of ``text``, on one line."""
    flat = "".join(char if char.isprintable() else " " for char in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= _SHOWN else flat[:_SHOWN] + "…"
