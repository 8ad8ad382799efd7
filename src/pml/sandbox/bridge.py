"""The host side of one run: tool calls from the snippet, printed output, and aborting.

A :class:`RunBridge` lives for one run. The sandbox reaches it through :meth:`RunBridge.call`
(the ``_pml_call`` host function behind ``mcp``), :meth:`RunBridge.on_print` (the print
sink, called from a pydantic-monty thread) and the two size guards of
:mod:`pml.sandbox.guards` (:meth:`RunBridge.result_too_large`,
:meth:`RunBridge.error_too_long`: a value too large to cross, reported instead). It

- checks each call (keyword arguments only, JSON arguments of at most
  ``max_tool_args_bytes``, with the calls still in flight) and counts it against
  ``max_tool_calls`` *before* the caller sees it;
- turns a ``SnippetToolError`` into the snippet's ``ToolError``;
- on a ``PmlError`` from the caller, or a refused call, or too much printed output, or a
  guard's report, records the error in :attr:`RunBridge.failure` and cancels the run (the
  engine raises it, even if the snippet caught what it saw);
- keeps at most ``max_result_bytes`` of printed output (the worker sends it in chunks of
  at most 8 KB, so no more than that crosses past the limit before the run stops);
- cancels tool calls still in flight when the run ends (:meth:`RunBridge.settle`):
  pydantic-monty runs them as separate tasks that would otherwise outlive the run.

Example::

    bridge = RunBridge(caller, limits, asyncio.get_running_loop())
    with anyio.CancelScope() as scope:
        bridge.attach(scope)
        value = await session.feed_run(source, external_lookup={BRIDGE: bridge.call},
                                       print_callback=bridge.on_print)
    await bridge.settle()
    bridge.failure, bridge.logs, bridge.tool_calls
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import re
from typing import Any, TypeGuard, cast

import anyio

from pml.config import SandboxSettings
from pml.errors import ExecutionFailed, InternalError, LimitExceeded, PmlError
from pml.sandbox.base import SnippetToolError, ToolCaller, ToolRef
from pml.sandbox.jsonvalue import NotJsonError, bounded_json_size, json_value
from pml.sandbox.truncate import bounded_text, error_bytes

logger = logging.getLogger(__name__)

# How long ``settle`` waits for cancelled tool calls to unwind.
SETTLE_TIMEOUT_S = 2.0

_ABORTED = "the run was stopped"
# Printed chunks kept before they are joined (each small string costs ~50 bytes besides
# its text: a flood of tiny prints must not cost more than the text it keeps).
_CHUNKS_BEFORE_JOIN = 256
_MAX_TYPE_NAME = 100
# What JSON escapes: a control character becomes ``\u0000`` (6 bytes), save the five with a
# short escape (``\n``: 2 bytes); a quote or a backslash takes 2 bytes too.
_LONG_ESCAPE = re.compile("[\x00-\x07\x0b\x0e-\x1f]")
_SHORT_ESCAPE = re.compile('[\x08\x09\x0a\x0c\x0d"\\\\]')


def json_text_bytes(text: str) -> int:
    """The bytes ``text`` takes inside a JSON string, escapes included (printed output is
    sent as JSON: a million NUL characters are six megabytes there)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    return size + 5 * len(_LONG_ESCAPE.findall(text)) + len(_SHORT_ESCAPE.findall(text))


class RunBridge:
    """Per-run host state; see the module docstring."""

    def __init__(
        self, caller: ToolCaller, limits: SandboxSettings, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._caller = caller
        self._limits = limits
        self._loop = loop
        self._run_scope: anyio.CancelScope | None = None
        self._call_scopes: set[anyio.CancelScope] = set()
        self._drained: anyio.Event | None = None
        self._settled = False
        self._chunks: list[str] = []
        self._printed_bytes = 0
        self._print_failure: LimitExceeded | None = None
        self._failure: PmlError | None = None
        self.tool_errors: list[SnippetToolError] = []
        self.tool_calls = 0
        self._args_in_flight = 0

    def attach(self, scope: anyio.CancelScope) -> None:
        """The cancel scope around the sandbox feed, cancelled by :meth:`abort`."""
        self._run_scope = scope

    @property
    def failure(self) -> PmlError | None:
        """Why the run must fail whatever the snippet did, if it must."""
        return self._failure if self._failure is not None else self._print_failure

    def abort(self, error: PmlError) -> None:
        """End the run with ``error`` (the first one recorded wins)."""
        if self._failure is None:
            self._failure = error
        self._cancel_run()

    def _cancel_run(self) -> None:
        if self._run_scope is not None:
            self._run_scope.cancel()

    @property
    def logs(self) -> list[str]:
        """Printed output as lines (``print`` adds the newlines)."""
        lines = "".join(self._chunks).split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines

    def on_print(self, stream: str, text: str) -> None:
        """Print sink (a pydantic-monty thread): keep the text; past ``max_result_bytes``,
        record the failure at once and cancel the run from the event loop."""
        del stream  # stdout and stderr share the log
        if self._print_failure is not None:
            return
        self._printed_bytes += json_text_bytes(text)
        limit = self._limits.max_result_bytes
        if self._printed_bytes > limit:
            self._print_failure = LimitExceeded(
                f"Printed output exceeds the limit of {limit} bytes", limit="max_result_bytes"
            )
            self._loop.call_soon_threadsafe(self._cancel_run)
            return
        self._chunks.append(text)
        if len(self._chunks) > _CHUNKS_BEFORE_JOIN:
            self._chunks = ["".join(self._chunks)]

    async def result_too_large(self, size: object, exact: object) -> None:
        """Guard report (host function): the snippet returned ``size`` bytes of JSON
        (at least, unless ``exact``) — more than ``max_result_bytes``; the value stays in
        the sandbox."""
        limit = self._limits.max_result_bytes
        if not _is_count(size) or size <= limit:
            raise TypeError("the result guard was misused")
        if exact is True:
            message = f"Result size {size} bytes exceeds the limit of {limit} bytes"
        else:
            message = f"Result size exceeds the limit of {limit} bytes (at least {size} bytes)"
        self.abort(LimitExceeded(message, limit="max_result_bytes"))
        raise RuntimeError(_ABORTED)

    async def error_too_long(
        self, exception_type: object, head: object, total: object, line: object
    ) -> None:
        """Guard report (host function): the snippet raised ``exception_type`` on snippet
        line ``line`` with a message of ``total`` characters, of which ``head`` crossed;
        the run fails with ``EXECUTION_FAILED`` and the message cut to the error bound."""
        if not isinstance(exception_type, str) or not isinstance(head, str):
            raise TypeError("the error guard was misused")
        if not _is_count(total) or total < len(head) or not _is_count(line):
            raise TypeError("the error guard was misused")
        kind = exception_type[:_MAX_TYPE_NAME] or "Exception"
        where = f" (line {line})"
        message = bounded_text(
            f"{kind}: {head}",
            error_bytes(self._limits) - len(where),
            more_chars=total - len(head),
        )
        self.abort(ExecutionFailed(message + where, exception_type=kind, line=line))
        raise RuntimeError(_ABORTED)

    async def call(self, namespace: object, name: object, args: object, kwargs: object) -> Any:
        """The ``_pml_call`` host function: one tool call from the snippet."""
        if self.failure is not None or self._settled:
            raise RuntimeError(_ABORTED)
        ref = _tool_ref(namespace, name)
        if args != () or not isinstance(kwargs, dict):
            raise TypeError(f"{ref}(): tool calls take keyword arguments only")
        try:
            arguments = json_value(cast("dict[str, Any]", kwargs), "arguments")
        except NotJsonError as error:
            raise TypeError(f"{ref}(): arguments are not JSON-serialisable: {error}") from None
        size = self._args_size(ref, arguments)
        limit = self._limits.max_tool_calls
        if self.tool_calls >= limit:
            self.abort(
                LimitExceeded(
                    f"Execution exceeded the limit of {limit} tool calls", limit="max_tool_calls"
                )
            )
            raise RuntimeError(_ABORTED)
        self.tool_calls += 1
        self._args_in_flight += size
        with anyio.CancelScope() as scope:
            self._call_scopes.add(scope)
            try:
                return await self._caller.call_tool(ref, arguments)
            except SnippetToolError as error:
                self.tool_errors.append(error)
                raise binascii.Incomplete(error.message) from None
            except PmlError as error:
                self.abort(error)
            except Exception:  # the caller's bug must end the run, not reach the snippet
                logger.exception("tool call %s failed inside the sandbox bridge", ref)
                self.abort(InternalError("Internal error while calling a tool"))
            finally:
                self._args_in_flight -= size
                self._call_scopes.discard(scope)
                if not self._call_scopes and self._drained is not None:
                    self._drained.set()
        raise RuntimeError(_ABORTED)

    def _args_size(self, ref: ToolRef, arguments: dict[str, Any]) -> int:
        """The JSON size of one call's arguments (at least), checked against
        ``max_tool_args_bytes`` alone and with every call still in flight: past it the run
        fails (``LIMIT_EXCEEDED``) before anything is sent."""
        limit = self._limits.max_tool_args_bytes
        size = bounded_json_size(arguments, limit)
        if size > limit:
            self.abort(
                LimitExceeded(
                    f"{ref}(): its arguments are more than {limit} bytes of JSON "
                    "(max_tool_args_bytes): send less in one call",
                    limit="max_tool_args_bytes",
                )
            )
            raise RuntimeError(_ABORTED)
        if self._args_in_flight + size > limit:
            self.abort(
                LimitExceeded(
                    f"{ref}(): the tool calls in flight at once would hold more than {limit} "
                    "bytes of arguments (max_tool_args_bytes): await some before sending more",
                    limit="max_tool_args_bytes",
                )
            )
            raise RuntimeError(_ABORTED)
        return size

    async def settle(self) -> None:
        """After the feed: refuse new calls, cancel those in flight, wait for them."""
        self._settled = True
        if not self._call_scopes:
            return
        self._drained = anyio.Event()
        for scope in list(self._call_scopes):
            scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_TIMEOUT_S):
            await self._drained.wait()


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tool_ref(namespace: object, name: object) -> ToolRef:
    if not isinstance(namespace, str) or not isinstance(name, str):
        raise TypeError("tool names must be strings")
    return ToolRef(namespace, name)
