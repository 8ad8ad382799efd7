"""A Starlette app under uvicorn on a bound loopback socket, for the client tests.

async with serving_on(app, sock):      # serving once this line returns
    ...                                 # stops (1 s grace at most) when the block ends
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

START_LIMIT_S = 10.0


class QuietUvicorn(uvicorn.Server):
    """uvicorn that says when it serves and leaves the test runner's signals alone."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        yield  # leave the test runner's signal handlers alone


@asynccontextmanager
async def serving_on(app: ASGIApp, sock: socket.socket) -> AsyncGenerator[None]:
    """``app`` served on ``sock`` (bound; it starts listening here) until the block ends."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = QuietUvicorn(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(START_LIMIT_S):
            await server.ready.wait()
        try:
            yield
        finally:
            server.should_exit = True
