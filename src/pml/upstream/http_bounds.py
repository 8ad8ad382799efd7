"""The HTTP side of an upstream server's bound: no answer is held past the bytes PML reads.

    http = httpx2.AsyncClient(transport=BoundedTransport(max_bytes))
    streamable_http_client(url, http_client=http, max_sse_event_size=max_bytes)

The SDK reads a JSON answer whole (``response.aread()``) before anything looks at its size,
so an upstream could make the gateway hold any number of bytes. ``BoundedTransport`` counts
the body of every answer that is not an event stream as it arrives, and stops at
``max_bytes`` (or at once, when ``Content-Length`` says more): the SDK then fails that call
with ``AnswerTooLarge``'s message, the same as an over-long stdio line
(``pml.upstream.stdio_transport.too_large_message``), and the connection serves on. Event
streams (``text/event-stream``) carry many messages over a long life; the SDK bounds each of
their events by ``max_sse_event_size``, which the caller sets to the same bound (its default,
1 MiB, would fail results PML accepts from stdio servers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from pml.upstream.stdio_transport import too_large_message

EVENT_STREAM = "text/event-stream"


class AnswerTooLarge(httpx2.StreamError):
    """An upstream answer's body went past the bound (the SDK fails its call with this)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(too_large_message(max_bytes))


class _CountedBody(httpx2.AsyncByteStream):
    def __init__(self, body: httpx2.AsyncByteStream, max_bytes: int, declared: int) -> None:
        self._body, self._max_bytes, self._declared = body, max_bytes, declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared > self._max_bytes:
            raise AnswerTooLarge(self._max_bytes)
        seen = 0
        async for chunk in self._body:
            seen += len(chunk)
            if seen > self._max_bytes:
                raise AnswerTooLarge(self._max_bytes)
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``httpx2``'s transport, each answer's body bounded (see the module)."""

    def __init__(self, max_bytes: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.max_bytes = max_bytes
        self._inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        content_type = response.headers.get("content-type", "").lower()
        if content_type.startswith(EVENT_STREAM):
            return response  # bounded per event by the SDK's ``max_sse_event_size``
        body = response.stream
        assert isinstance(body, httpx2.AsyncByteStream)  # an async transport's answer
        response.stream = _CountedBody(body, self.max_bytes, _declared_length(response))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _declared_length(response: httpx2.Response) -> int:
    try:
        return int(response.headers.get("content-length", "0"))
    except ValueError:
        return 0
