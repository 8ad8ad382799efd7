"""Stopping a serving gateway on SIGTERM/SIGINT without leaving its upstream children behind.

received: list[int] = []
serving = anyio.CancelScope()
with signals_stop_children(received, serving):
    ...                     # open the gateway; serve inside ``serving``
if received:                # end by the signal, once everything is closed
    signal.raise_signal(received[0])
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Generator
from contextlib import contextmanager

import anyio

from pml.upstream.children import terminate_children

logger = logging.getLogger(__name__)


@contextmanager
def signals_stop_children(received: list[int], scope: anyio.CancelScope) -> Generator[None]:
    """From start to the end of shutdown, SIGTERM/SIGINT signal the children and cancel ``scope``.

    One handler for the whole serve: a busy upstream child ignores its closed stdin, so
    whenever PML is told to stop (also halfway through its orderly stop, when its parent's
    patience may already be running out) the children are signalled first, in the handler
    itself, before anything can end PML. The handler stays installed until the backstop
    sweep has run (asyncio's own signal handling restores the default action when its
    receiver closes, which would let a late SIGTERM end PML with children still running).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return
    loop = asyncio.get_running_loop()

    def stop(number: int) -> None:
        logger.warning("received %s: stopping", signal.Signals(number).name)
        scope.cancel()

    def handler(number: int, _frame: object) -> None:
        terminate_children()
        if number not in received:
            received.append(number)
            loop.call_soon_threadsafe(stop, number)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
