"""Where the steps of a request are observed: metrics, spans and log lines hook in here.

    with observe.step("upstream_call", server="time", tool="get_current_time") as step:
        result = await pool.call_tool("time", "get_current_time", {})
        if result.is_error:
            step.outcome = "tool_error"

Core code marks its steps; observers (``add_observer``) see each begin and end: the
Prometheus metrics (``telemetry.metrics``), OpenTelemetry spans (``telemetry.tracing``, when
enabled) and the access and slow-call log (``telemetry.logs``). A step that raises ends with
the error's code as its outcome (``cancelled`` when cancelled, ``error`` for anything else)
and the exception goes on unchanged. With no observer a step costs one check.

Kinds and their attributes (values are short strings; never arguments or secrets):

- ``tool_call``: a ``tools/call`` from a client — ``tool``, ``lane`` (``mcp`` or ``stdio``)
- ``upstream_call``: one call to an upstream server — ``server``, ``tool``
- ``execute``: a ``pml_execute`` run or a capability tool — ``mode``
- ``policy``: the policy decision of a request — ``source``
- ``sandbox``: a snippet in the sandbox; ``sandbox_wait``: waiting for a sandbox worker
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pml.errors import PmlError

logger = logging.getLogger(__name__)

StepKind = Literal["tool_call", "upstream_call", "execute", "policy", "sandbox", "sandbox_wait"]


@dataclass(slots=True)
class Step:
    """One observed step; code inside the block may set ``outcome`` and add attributes."""

    kind: StepKind
    attributes: dict[str, str]
    started: float = field(default_factory=time.perf_counter)
    outcome: str = "ok"
    duration_s: float = 0.0
    error: BaseException | None = None

    def set(self, **attributes: str) -> None:
        """Add attributes known only once the step has begun."""
        self.attributes.update(attributes)


class Observer(Protocol):
    """Sees every step: ``begin`` returns a token handed back to ``end``."""

    def begin(self, step: Step) -> object: ...

    def end(self, step: Step, token: object) -> None: ...


_observers: tuple[Observer, ...] = ()


def add_observer(observer: Observer) -> None:
    """Start showing steps to ``observer`` (idempotent)."""
    global _observers
    if observer not in _observers:
        _observers = (*_observers, observer)


def remove_observer(observer: Observer) -> None:
    """Stop showing steps to ``observer`` (no error if it was not added)."""
    global _observers
    _observers = tuple(known for known in _observers if known is not observer)


def observers() -> tuple[Observer, ...]:
    """The observers installed now, in the order they were added."""
    return _observers


def outcome_of(error: BaseException) -> str:
    """The outcome a step ends with when ``error`` escapes it."""
    if isinstance(error, PmlError):
        return error.code
    if isinstance(error, asyncio.CancelledError):  # the only backend the gateway runs on
        return "cancelled"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "error"


@contextmanager
def step(kind: StepKind, **attributes: str) -> Generator[Step]:
    """Observe the block as one step of ``kind`` (see the module)."""
    current = Step(kind, attributes)
    watching = _observers
    if not watching:
        yield current
        return
    tokens = [_begin(observer, current) for observer in watching]
    try:
        yield current
    except BaseException as error:
        current.outcome = outcome_of(error)
        current.error = error
        raise
    finally:
        current.duration_s = time.perf_counter() - current.started
        for observer, token in zip(reversed(watching), reversed(tokens), strict=True):
            try:
                observer.end(current, token)
            except Exception:  # observing must never change what the step did
                logger.exception("observer %r failed", observer)


def _begin(observer: Observer, current: Step) -> object:
    try:
        return observer.begin(current)
    except Exception:  # observing must never change what the step does
        logger.exception("observer %r failed", observer)
        return None
