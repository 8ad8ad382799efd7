"""Size guards that run inside the sandbox, so that no large value crosses to the host.

What a snippet returns or raises crosses from the worker to the gateway whole, and
converting it costs the gateway several times its size (a 100 MB exception message grew
the gateway by ~300 MB before any check could look at it). The guards check sizes where
the value is, in the worker, whose memory is already bounded (``memory_mb``). The snippet
is rewritten in place (same lines; text is only inserted within a line):

- every module-level ``return X`` becomes ``return _pml_result((X))``, which measures the
  value's JSON text and, past ``max_result_bytes``, reports the size to the host function
  :data:`RESULT_TOO_LARGE` instead of returning the value;
- every ``raise X`` becomes ``raise _pml_raised((X), line)`` and every ``assert c, m``
  ``assert c, _pml_message((m), line)``: a message longer than :data:`MAX_ERROR_CHARS` is
  reported (its head, its length, the snippet line) to :data:`ERROR_TOO_LONG` instead of
  being raised. Shorter ones are raised untouched (same type, message and line).

An exception the snippet does not raise itself (``KeyError`` of a huge key, a bare
``raise`` of a caught one) is not guarded: pydantic-monty re-raises without the original
line, so no ``try`` can wrap the snippet. The host checks whatever crosses
(:mod:`pml.sandbox.failures`), and the worker's memory limit bounds it. Printed output
needs no guard: the worker streams it in chunks of at most 8 KB and the host stops
keeping it at the limit (:class:`~pml.sandbox.bridge.RunBridge`).

Names starting with ``_pml`` are refused in snippets, so a snippet cannot rebind a guard.

Example::

    >>> guarded("x = 1\\nreturn x").code
    'x = 1\\nreturn _pml_result((x))'
    >>> guarded("raise ValueError(m)").code
    'raise _pml_raised((ValueError(m)), 1)'
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

RESULT_TOO_LARGE = "_pml_result_too_large"
"""Host function: ``(size, exact)`` — the result's JSON is ``size`` bytes (or more)."""
ERROR_TOO_LONG = "_pml_error_too_long"
"""Host function: ``(exception_type, head, total_chars, line)`` — the message was cut."""
MAX_RESULT_INPUT = "_pml_max_result"
"""The global holding ``max_result_bytes`` inside the sandbox (bound through ``inputs``)."""

MAX_ERROR_CHARS = 65_536
"""Characters of an exception message allowed to cross whole (the host then cuts to bytes)."""

RESERVED_PREFIX = "_pml"

_RESULT_GUARD = f"""\
import json as _pml_json
def _pml_result(value):
    if value is None:
        return None
    limit = {MAX_RESULT_INPUT}
    if isinstance(value, str) and len(value) > limit:
        {RESULT_TOO_LARGE}(len(value) + 2, False)
    try:
        text = _pml_json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        size = _pml_estimate(value, limit)
        if size > limit:
            {RESULT_TOO_LARGE}(size, False)
        return value
    if text.isascii():
        size, exact = len(text), True
    elif len(text) > limit:
        size, exact = len(text), False
    else:
        size, exact = len(text.encode()), True
    if size > limit:
        {RESULT_TOO_LARGE}(size, exact)
    return value
def _pml_estimate(value, limit):
    size = 0
    stack = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            size += len(item) + 2
        elif isinstance(item, (list, tuple, set, frozenset)):
            size += 2
            stack.extend(item)
        elif isinstance(item, dict):
            size += 2
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            size += 1
    return size
"""

_RAISE_GUARD = f"""\
def _pml_raised(error, line):
    message = str(error)
    if len(message) > {MAX_ERROR_CHARS}:
        {ERROR_TOO_LONG}(type(error).__name__, message[:{MAX_ERROR_CHARS}], len(message), line)
    return error
"""

_ASSERT_GUARD = f"""\
def _pml_message(message, line):
    text = str(message)
    if len(text) > {MAX_ERROR_CHARS}:
        {ERROR_TOO_LONG}("AssertionError", text[:{MAX_ERROR_CHARS}], len(text), line)
    return message
"""


@dataclass(frozen=True, slots=True)
class Guarded:
    """The rewritten snippet (``code``, same lines), the guard functions it needs
    (``functions``), and what was inserted where, to map columns back."""

    code: str
    functions: str
    inserts: tuple[tuple[int, int, int], ...]  # (snippet line, original offset, length)

    def user_column(self, line: int, column: int) -> int:
        """The snippet's column (1-based) of a column on its rewritten line ``line``."""
        shift = 0
        for at_line, offset, length in sorted(self.inserts):
            if at_line != line:
                continue
            if column - 1 >= offset + shift + length:
                shift += length
        return max(1, column - shift)


def guarded(code: str) -> Guarded | None:
    """``code`` with its guards, or ``None`` when it cannot be rewritten safely (the
    host-side checks then stand alone). ``code`` must parse."""
    try:
        tree = ast.parse(code, mode="exec")
        lines = code.split("\n")
        inserts = _inserts(tree, lines)
        rewritten = _apply(lines, inserts)
        ast.parse(rewritten, mode="exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError, IndexError):
        return None
    texts = {text for _, _, text in inserts}
    functions = "".join(
        guard
        for guard, marker in (
            (_RESULT_GUARD, "_pml_result(("),
            (_RAISE_GUARD, "_pml_raised(("),
            (_ASSERT_GUARD, "_pml_message(("),
        )
        if marker in texts
    )
    shifts = tuple((index + 1, offset, len(text)) for index, offset, text in inserts)
    return Guarded(code=rewritten, functions=functions, inserts=shifts)


def reserved_name(tree: ast.Module) -> tuple[str, int] | None:
    """The first name of the snippet that starts with ``_pml`` (and its line), if any."""
    for node in ast.walk(tree):
        for name in _bound_or_read_names(node):
            if name.startswith(RESERVED_PREFIX):
                return name, getattr(node, "lineno", 1)
    return None


def _bound_or_read_names(node: ast.AST) -> list[str]:
    match node:
        case ast.Name(id=name):
            return [name]
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            return [name]
        case ast.arg(arg=name):
            return [name]
        case ast.alias(name=name, asname=asname):
            return [asname or name.partition(".")[0]]
        case ast.ExceptHandler(name=str() as name):
            return [name]
        case ast.Global(names=names) | ast.Nonlocal(names=names):
            return list(names)
        case ast.MatchAs(name=str() as name) | ast.MatchStar(name=str() as name):
            return [name]
        case ast.MatchMapping(rest=str() as name):
            return [name]
        case _:
            return []


def _inserts(tree: ast.Module, lines: list[str]) -> list[tuple[int, int, str]]:
    """Where to insert what: ``(line index, character offset, text)``."""
    inserts: list[tuple[int, int, str]] = []

    def wrap(value: ast.expr, opening: str, closing: str) -> None:
        if value.end_lineno is None or value.end_col_offset is None:
            raise ValueError("an expression without an end position")
        start = _char_offset(lines[value.lineno - 1], value.col_offset)
        end = _char_offset(lines[value.end_lineno - 1], value.end_col_offset)
        inserts.append((value.lineno - 1, start, opening))
        inserts.append((value.end_lineno - 1, end, closing))

    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            wrap(node.exc, "_pml_raised((", f"), {node.lineno})")
        elif isinstance(node, ast.Assert) and node.msg is not None:
            wrap(node.msg, "_pml_message((", f"), {node.lineno})")
    for node in _module_level_returns(tree):
        if node.value is not None:
            wrap(node.value, "_pml_result((", "))")
    return inserts


def _apply(lines: list[str], inserts: list[tuple[int, int, str]]) -> str:
    lines = list(lines)
    # From the end backwards, so that earlier offsets stay right; at one spot, a closing
    # text (inserted later in the order) lands after an opening one placed there.
    for index, offset, text in sorted(inserts, key=lambda i: (i[0], i[1]), reverse=True):
        line = lines[index]
        lines[index] = line[:offset] + text + line[offset:]
    return "\n".join(lines)


def _module_level_returns(tree: ast.Module) -> list[ast.Return]:
    found: list[ast.Return] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Return):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _char_offset(line: str, utf8_offset: int) -> int:
    """``ast`` columns count UTF-8 bytes; lines are indexed by characters."""
    data = line.encode("utf-8", "surrogatepass")[:utf8_offset]
    return len(data.decode("utf-8", "surrogatepass"))
