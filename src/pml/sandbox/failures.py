"""Translating what pydantic-monty raises into PML's errors, with the snippet's line numbers.

=============================================  ========================================
pydantic-monty                                 PML
=============================================  ========================================
``NotImplementedError`` raised by its parser,  ``CodeSyntaxError`` (SYNTAX_ERROR)
``MontySyntaxError``
``TimeoutError`` of a feed/sleep limit,        ``ExecutionTimeout`` (TIMEOUT)
a worker killed by the pool's watchdog
``MemoryError`` of the memory limit            ``LimitExceeded`` (memory_mb)
``RecursionError``                             ``LimitExceeded`` (recursion_depth)
``RuntimeError`` of the suspension limit       ``LimitExceeded`` (host_round_trips)
``ToolError`` (``binascii.Incomplete``)        ``ToolCallError`` (TOOL_ERROR)
any other exception                            ``ExecutionFailed`` (EXECUTION_FAILED)
a crashed worker                               ``ExecutionFailed`` (exception_type
                                               ``WorkerCrashed``)
=============================================  ========================================

Messages are bounded (``pml.sandbox.truncate``): a snippet's exception message longer than
the error bound is cut with a ``[truncated: N more characters]`` marker. The sandbox's guard
already keeps long messages from crossing (``pml.sandbox.guards``); this is the host's own
check for whatever crosses anyway.

Example::

    >>> execution_failed("ZeroDivisionError", "division by zero", 3).message
    'ZeroDivisionError: division by zero (line 3)'
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence

import pydantic_monty as monty

from pml.config import SandboxSettings
from pml.errors import (
    CodeSyntaxError,
    ExecutionFailed,
    ExecutionTimeout,
    LimitExceeded,
    PmlError,
    ToolCallError,
)
from pml.sandbox.base import SnippetToolError
from pml.sandbox.program import Program
from pml.sandbox.truncate import MAX_ERROR_BYTES, bounded_text, error_bytes, utf8_size

MAX_RECURSION_DEPTH = 1000
"""Frames a snippet may nest (Monty's default, made explicit)."""

_PARSER_PREFIX = "The monty syntax parser does not yet support"
_TIMEOUT_MARKERS = ("feed time limit exceeded", "turn time limit exceeded", "sleep limit exceeded")


def timeout_error(limits: SandboxSettings) -> ExecutionTimeout:
    """The one message of a run that ran out of time."""
    return ExecutionTimeout(
        f"Execution exceeded the time limit of {limits.wall_time_s:g} s", limit="wall_time_s"
    )


def execution_failed(
    exception_type: str, message: str, line: int | None, *, max_bytes: int = MAX_ERROR_BYTES
) -> ExecutionFailed:
    """``ExecutionFailed`` for an exception the snippet raised (and did not catch), its
    message cut to ``max_bytes``."""
    where = "" if line is None else f" (line {line})"
    if message:  # bounded before it is copied into the whole text
        prefix = f"{exception_type}: "
        room = max_bytes - utf8_size(prefix) - len(where)
        text = prefix + bounded_text(message, max(room, 0)) + where
    else:
        text = exception_type + where
    return ExecutionFailed(text, exception_type=exception_type, line=line)


def translate(
    error: monty.MontyError,
    program: Program,
    limits: SandboxSettings,
    tool_errors: Sequence[SnippetToolError],
) -> PmlError:
    """The ``PmlError`` for a failed feed (see the module table)."""
    max_bytes = error_bytes(limits)
    if isinstance(error, monty.MontyCrashedError):
        if error.timed_out:
            return timeout_error(limits)
        return execution_failed(
            "WorkerCrashed", f"the sandbox worker died: {error}", None, max_bytes=max_bytes
        )
    if isinstance(error, monty.MontyTypingError | monty.MontyConversionError):
        return ExecutionFailed(
            bounded_text(str(error), max_bytes),
            exception_type=type(error.exception()).__name__,
        )
    exception = error.exception()
    message = str(exception)
    frames = _frames(error)
    if isinstance(error, monty.MontySyntaxError) or (
        isinstance(exception, NotImplementedError) and message.startswith(_PARSER_PREFIX)
    ):
        return _syntax_error(message, frames, program)
    line = _snippet_line(frames, program)
    if isinstance(exception, TimeoutError) and message.startswith(_TIMEOUT_MARKERS):
        return timeout_error(limits)
    if isinstance(exception, MemoryError) and message.startswith("memory limit exceeded"):
        return LimitExceeded(
            f"Execution exceeded the memory limit of {limits.memory_mb} MB", limit="memory_mb"
        )
    if isinstance(exception, RecursionError):
        return LimitExceeded(
            f"Execution exceeded the maximum recursion depth of {MAX_RECURSION_DEPTH}",
            limit="recursion_depth",
        )
    if isinstance(exception, RuntimeError) and message.startswith("suspension limit"):
        return LimitExceeded(
            "Execution exceeded the limit of host round trips (tool calls, sleeps, lookups)",
            limit="host_round_trips",
        )
    if isinstance(exception, binascii.Incomplete):
        return _tool_error(message, line, tool_errors, max_bytes)
    return execution_failed(type(exception).__name__, message, line, max_bytes=max_bytes)


def _frames(error: monty.MontyError) -> list[monty.Frame]:
    if isinstance(error, monty.MontyRuntimeError | monty.MontySyntaxError):
        return error.traceback()
    return []


def _snippet_line(frames: Sequence[monty.Frame], program: Program) -> int | None:
    """The innermost frame that is snippet code (not prelude), as a snippet line."""
    for frame in reversed(frames):
        line = program.user_line(frame.line)
        if line is not None:
            return line
    return None


def _syntax_error(message: str, frames: Sequence[monty.Frame], program: Program) -> PmlError:
    message = message.replace(_PARSER_PREFIX, "The sandbox does not support")
    line = column = None
    for frame in frames:
        line = program.user_line(frame.line)
        if line is not None:
            column = program.user_column(line, frame.column)
            break
    if line is None or column is None:
        return CodeSyntaxError(f"Syntax error: {message}", line=None, column=None)
    return CodeSyntaxError(
        f"Syntax error at line {line}, column {column}: {message}", line=line, column=column
    )


def _tool_error(
    message: str, line: int | None, tool_errors: Sequence[SnippetToolError], max_bytes: int
) -> PmlError:
    for failed in reversed(tool_errors):
        if failed.message == message:
            prefix = f"Tool {failed.tool} failed: "
            text = prefix + bounded_text(message, max(max_bytes - utf8_size(prefix), 0))
            return ToolCallError(text, tool=failed.tool)
    # The snippet raised ToolError itself.
    return execution_failed("ToolError", message, line, max_bytes=max_bytes)
