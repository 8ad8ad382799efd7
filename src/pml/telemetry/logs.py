"""Logging of a serving process: ``[log]`` format and levels, the access and slow-call logs.

    logs.configure(settings.log)                    # pml serve: stderr, text or JSON lines
    app = AccessLogMiddleware(app, caller=who)      # one pml.access line per HTTP request

Everything goes to stderr (over stdio, stdout carries only the protocol). With
``format = "json"`` each record is one JSON object per line: ``time``, ``level``,
``logger``, ``message`` and the record's extra fields. ``access = true`` writes one JSON
line (logger ``pml.access``) per HTTP request and per tool call, whatever the format:
who (the key's display prefix, never the key; the user), what (method and path without
the query, or tool and lane), the status or outcome, the duration and the bytes sent —
never arguments. ``slow_call_ms`` warns (logger ``pml.slow``) of tool calls, upstream calls
and runs slower than that.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

from pml.sections_ops import LogSettings
from pml.telemetry import observe
from pml.telemetry.observe import Step

HANDLER_NAME = "pml"  # the stderr handler of the CLI and of pml serve (replaced here)
ACCESS_HANDLER_NAME = "pml.access"
ACCESS_LOGGER = "pml.access"
SLOW_LOGGER = "pml.slow"
SLOW_KINDS = frozenset({"tool_call", "upstream_call", "execute"})
MAX_FIELD_CHARS = 200
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

access_log = logging.getLogger(ACCESS_LOGGER)
slow_log = logging.getLogger(SLOW_LOGGER)

# Attributes every LogRecord has: anything else on a record is an extra field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
}

AsgiScope = MutableMapping[str, Any]
AsgiMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiMessage]]
Send = Callable[[AsgiMessage], Awaitable[None]]
AsgiApp = Callable[[AsgiScope, Receive, Send], Awaitable[None]]
# (key display prefix, user) of an HTTP request once the app has seen it; "" when unknown.
Caller = Callable[[AsgiScope], tuple[str, str]]


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """``time``, ``level``, ``logger``, ``message``, the extra fields, the exception."""
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, separators=(",", ":"))


class StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever ``sys.stderr`` is when a record comes (as logging's last resort
    does): a caller that swaps it for a while, then closes its copy, breaks nothing."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
        return sys.stderr


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def shown(value: str) -> str:
    """An outside value as a log field: cut to ``MAX_FIELD_CHARS``."""
    return value if len(value) <= MAX_FIELD_CHARS else value[:MAX_FIELD_CHARS] + "…"


class LogObserver:
    """Turns ended steps into access lines and slow-call warnings (see module)."""

    def __init__(self, *, access: bool, slow_call_ms: float) -> None:
        self.access = access
        self.slow_s = slow_call_ms / 1000

    def begin(self, step: Step) -> object:
        """Nothing to do when a step begins."""
        return None

    def end(self, step: Step, token: object) -> None:
        """Log the access line of a tool call, and warn of a slow call."""
        if self.access and step.kind == "tool_call":
            self._access(step)
        if self.slow_s and step.duration_s > self.slow_s and step.kind in SLOW_KINDS:
            self._slow(step)

    def _access(self, step: Step) -> None:
        attributes = step.attributes
        tool = shown(attributes.get("tool", ""))
        access_log.info(
            "tool call %s %s",
            json.dumps(tool),
            step.outcome,
            extra={
                "event": "tool_call",
                "key": attributes.get("key", ""),
                "user": attributes.get("user", ""),
                "tool": tool,
                "lane": attributes.get("lane", ""),
                "outcome": step.outcome,
                "duration_ms": round(step.duration_s * 1000, 3),
            },
        )

    def _slow(self, step: Step) -> None:
        attributes = step.attributes
        fields: dict[str, str] = {}
        for name in ("server", "tool", "mode", "lane", "user"):
            if name in attributes:
                fields[name] = shown(attributes[name])
        what = " ".join(f"{name}={json.dumps(value)}" for name, value in fields.items())
        took_ms = round(step.duration_s * 1000, 3)
        slow_log.warning(
            "slow %s (%s) took %.0f ms, over %.0f ms",
            step.kind,
            what,
            took_ms,
            self.slow_s * 1000,
            extra={
                "event": "slow_call",
                "kind": step.kind,
                **fields,
                "outcome": step.outcome,
                "duration_ms": took_ms,
                "threshold_ms": self.slow_s * 1000,
            },
        )


class AccessLogMiddleware:
    """ASGI middleware: one ``pml.access`` line per HTTP request while access logging is on."""

    def __init__(self, app: AsgiApp, *, caller: Caller) -> None:
        self.app = app
        self.caller = caller

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        sent = 0

        async def counting(message: AsgiMessage) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        except BaseException:
            status = status or 500  # what the error middleware outside will answer
            raise
        finally:
            self._line(scope, status, sent, time.perf_counter() - started)

    def _line(self, scope: AsgiScope, status: int, sent: int, elapsed_s: float) -> None:
        key, user = self.caller(scope)
        method = shown(str(scope.get("method", "")))
        path = shown(str(scope.get("path", "")))
        access_log.info(
            "%s %s %d",
            method,
            json.dumps(path),
            status,
            extra={
                "event": "http",
                "key": key,
                "user": user,
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": round(elapsed_s * 1000, 3),
                "bytes": sent,
            },
        )


_installed: list[LogObserver] = []
_levels_set: set[str] = set()


def configure(settings: LogSettings) -> None:
    """Apply ``[log]`` to this process (again on each call: the last settings win)."""
    root = logging.getLogger()
    _remove_handlers(root, HANDLER_NAME)
    handler = StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else _text_formatter())
    root.addHandler(handler)
    root.setLevel(settings.level)
    for name in _levels_set - set(settings.levels):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, level in settings.levels.items():
        logging.getLogger(name).setLevel(level)
    _levels_set.clear()
    _levels_set.update(settings.levels)
    _configure_access(settings.access)
    _observe(LogObserver(access=settings.access, slow_call_ms=settings.slow_call_ms))


def reset() -> None:
    """Undo ``configure``: PML's handlers, per-logger levels and step observer removed."""
    _remove_handlers(logging.getLogger(), HANDLER_NAME)
    for name in _levels_set:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _levels_set.clear()
    _configure_access(False)
    access_log.disabled = False
    _observe(None)


def _text_formatter() -> logging.Formatter:
    formatter = logging.Formatter(TEXT_FORMAT)
    formatter.converter = time.gmtime  # times in UTC, as in the JSON lines
    formatter.default_msec_format = "%s.%03dZ"
    return formatter


def _configure_access(enabled: bool) -> None:
    _remove_handlers(access_log, ACCESS_HANDLER_NAME)
    access_log.disabled = not enabled
    access_log.propagate = not enabled
    if enabled:  # JSON whatever the format: the access log is read by programs
        handler = StderrHandler()
        handler.set_name(ACCESS_HANDLER_NAME)
        handler.setFormatter(JsonFormatter())
        access_log.addHandler(handler)
        access_log.setLevel(logging.INFO)
    else:
        access_log.setLevel(logging.NOTSET)


def _remove_handlers(logger: logging.Logger, name: str) -> None:
    for handler in [h for h in logger.handlers if h.get_name() == name]:
        logger.removeHandler(handler)
        handler.close()


def _observe(observer: LogObserver | None) -> None:
    for old in _installed:
        observe.remove_observer(old)
    _installed.clear()
    if observer is not None and (observer.access or observer.slow_s):
        observe.add_observer(observer)
        _installed.append(observer)
