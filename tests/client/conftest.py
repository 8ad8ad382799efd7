"""A fake ``POST /api/traces`` on a real uvicorn (loopback), and a trace queue per test.

The fake server records every batch it receives and answers from a script (see
``FakeTraceServer``). ``quiet_socket`` is bound but not listening, so a syncer pointed at it
meets a server that is down until ``down_server.serving(quiet_socket)`` brings it up.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from client.serving import serving_on
from pml.client.trace_queue import TraceQueue
from pml.gateway.http import base_url, listen_socket

Answer = tuple[int, Any] | tuple[int, Any, dict[str, str]]  # status, body[, headers]
Responder = Callable[[list[dict[str, Any]]], Answer]
HANG: Final = -1  # a scripted status: never answer (until the server stops)


def captured(traces: list[dict[str, Any]]) -> Answer:
    results = [
        {"traceId": t.get("traceId"), "workflowId": t.get("workflowId"), "status": "captured"}
        for t in traces
    ]
    return 200, {"results": results}


class FakeTraceServer:
    """Records each batch (traces, Authorization header, arrival time) and answers.

    ``respond(answer, ...)`` scripts the next answers: ``(status, body[, headers])`` or a
    responder called with the batch; a 200 with body None captures every trace. After the
    script, ``fallback`` answers."""

    def __init__(self) -> None:
        self.url = ""
        self.batches: list[list[dict[str, Any]]] = []
        self.authorizations: list[str | None] = []
        self.arrivals: list[float] = []
        self.script: deque[Answer | Responder] = deque()
        self.fallback: Responder = captured
        self._changed = anyio.Event()
        self._release = anyio.Event()
        self.app = Starlette(routes=[Route("/api/traces", self._traces, methods=["POST"])])

    def respond(self, *answers: Answer | Responder) -> None:
        self.script.extend(answers)

    @property
    def traces(self) -> list[dict[str, Any]]:
        return [trace for batch in self.batches for trace in batch]

    @property
    def trace_ids(self) -> list[str]:
        return [trace["traceId"] for trace in self.traces]

    async def wait_until(self, ready: Callable[[], bool], timeout_s: float = 10.0) -> None:
        with anyio.fail_after(timeout_s):
            while not ready():
                await self._changed.wait()

    async def _traces(self, request: Request) -> Response:
        traces: list[dict[str, Any]] = (await request.json())["traces"]
        self.batches.append(traces)
        self.authorizations.append(request.headers.get("authorization"))
        self.arrivals.append(time.monotonic())
        self._changed.set()
        self._changed = anyio.Event()
        step = self.script.popleft() if self.script else self.fallback
        answer = step(traces) if callable(step) else step
        status, body = answer[0], answer[1]
        headers: dict[str, str] = answer[2] if len(answer) == 3 else {}
        if status == HANG:
            await self._release.wait()
            status = 503
        if status == 200 and body is None:
            body = captured(traces)[1]
        return JSONResponse(body, status_code=status, headers=headers)

    @asynccontextmanager
    async def serving(self, sock: socket.socket) -> AsyncGenerator[None]:
        """uvicorn serving this app on ``sock`` (bound; it starts listening here)."""
        async with serving_on(self.app, sock):
            try:
                yield
            finally:
                self._release.set()


@pytest.fixture
def quiet_socket() -> Generator[socket.socket]:
    """A loopback socket bound but not listening: connections to it are refused."""
    with contextlib.closing(listen_socket("127.0.0.1", 0)) as sock:
        yield sock


@pytest.fixture
async def down_server(quiet_socket: socket.socket) -> FakeTraceServer:
    """A fake server not started yet (``down_server.serving(quiet_socket)`` starts it)."""
    fake = FakeTraceServer()
    fake.url = base_url(quiet_socket)
    return fake


@pytest.fixture
async def server() -> AsyncGenerator[FakeTraceServer]:
    """A running fake server."""
    fake = FakeTraceServer()
    with contextlib.closing(listen_socket("127.0.0.1", 0)) as sock:
        fake.url = base_url(sock)
        async with fake.serving(sock):
            yield fake


@pytest.fixture
def queue_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "traces.db"


@pytest.fixture
def queue(queue_path: Path) -> Generator[TraceQueue]:
    with TraceQueue(queue_path) as opened:
        yield opened
