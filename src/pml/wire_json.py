"""JSON of any depth is an input error, never a crash: one limit, checked without recursion.

PML refuses JSON nested more than ``MAX_JSON_DEPTH`` levels (each object or array is one
level; ``{"a": [1]}`` has two) wherever it comes from: a stdio line, an HTTP body, tool
arguments, an upstream result, a stored value. Python's ``json`` parses and dumps by
recursion (a ``RecursionError`` near 1 000 levels), pydantic stops at 200 levels when it
parses and about 250 when it serialises, the SDK's parser is pydantic's: 128 levels leave
room for a protocol envelope (message, params, arguments) around any accepted value.

Every check here is iterative, and text is checked *before* it is parsed (a scan of the
brackets outside strings), so no depth reaches a recursive parser::

    >>> text_too_deep("[" * 100_000)
    True
    >>> loads('{"a": "[[[[", "b": [1, 2]}')
    {'a': '[[[[', 'b': [1, 2]}
    >>> loads("[" * 200 + "]" * 200)
    Traceback (most recent call last):
    ...
    wire_json.TooDeep: the JSON is nested more than 128 levels deep
    >>> value_too_deep([[[]]], limit=2)
    True

This module needs the standard library only (``early_stdio`` imports it before anything).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from itertools import accumulate
from typing import Any, Final, cast

MAX_JSON_DEPTH: Final = 128
# JSON-RPC's parse error (-32700) for a message nested too deep (stdio and HTTP say the same).
TOO_DEEP_MESSAGE: Final = (
    f"Parse error: the message is nested more than {MAX_JSON_DEPTH} levels deep"
)

# A JSON string, or an unterminated one up to the end of the text; possessive, so that no
# text makes the scan backtrack (each byte is looked at once).
_STRING: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_ESCAPE: Final = re.compile(rb"\\.", re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_STEP: Final = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))
_CONTAINERS: Final = (dict, list, tuple)


class TooDeep(ValueError):
    """JSON nested more than the limit allows (refused before it is parsed or walked)."""

    def __init__(self, what: str = "the JSON", limit: int = MAX_JSON_DEPTH) -> None:
        super().__init__(f"{what} is nested more than {limit} levels deep")
        self.limit = limit


def text_too_deep(data: bytes | bytearray | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON parser reading ``data`` would go more than ``limit`` levels deep.

    Brackets inside strings do not count (escapes are honoured); text that does not open
    with an array or an object nests nothing; other text that is not JSON is measured as far
    as a parser would read it, and at worst counted deeper than it is.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # the usual case: fewer opening brackets than the limit
    if not raw.lstrip(b" \t\r\n").startswith((b"[", b"{")):
        return False  # a scalar first (or not JSON at all): no parser nests anything
    if b"\\" in raw:  # escapes (inside strings: a parser refuses one anywhere else)
        raw = _ESCAPE.sub(b"", raw)
    if b'"' in raw:  # then every quote opens or closes a string: keep what is outside
        raw = b"".join(raw.split(b'"')[0::2])
    brackets = raw.translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    return _bracket_depth(brackets, limit) > limit


def _bracket_depth(brackets: bytes, limit: int) -> int:
    """The deepest running count of ``brackets`` (``[{`` up, ``]}`` down), or a number over
    ``limit`` when it is over. A parser stops at the first unmatched closing bracket, so the
    count is its depth up to there, and never less than its depth anywhere it reads."""
    # Dropping adjacent pairs ("[]", "{}") costs little and lowers the deepest count by at
    # most one per pass: when what is left is shallow enough, so was the whole.
    passes = 2
    reduced = brackets
    for _ in range(passes):
        reduced = reduced.replace(b"[]", b"").replace(b"{}", b"")
    deepest = _deepest(reduced)
    if deepest > limit or deepest + 2 * passes <= limit:
        return deepest
    return _deepest(brackets)


def _deepest(brackets: bytes) -> int:
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_text(
    data: bytes | bytearray | str, what: str = "the JSON", limit: int = MAX_JSON_DEPTH
) -> None:
    """Raise ``TooDeep`` when ``data`` is JSON text nested more than ``limit`` levels."""
    if text_too_deep(data, limit):
        raise TooDeep(what, limit)


def loads(
    data: bytes | bytearray | str, *, what: str = "the JSON", limit: int = MAX_JSON_DEPTH
) -> Any:
    """``json.loads(data)``, refusing text nested deeper than ``limit`` (``TooDeep``).

    Every failure is a ``ValueError``: ``json.JSONDecodeError``, ``UnicodeDecodeError`` or
    ``TooDeep``; never a ``RecursionError``, however deep the text and the caller's stack.
    """
    check_text(data, what, limit)
    try:
        return json.loads(data)
    except RecursionError:  # a caller already deep in its stack: still an input error
        raise TooDeep(what, limit) from None


def value_too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (dicts, lists, tuples) nests more than ``limit`` levels (a value
    that contains itself counts as too deep)."""
    level: list[Any] = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for container in level:
            items: Iterable[object] = (
                cast("dict[object, object]", container).values()
                if isinstance(container, dict)
                else cast("Iterable[object]", container)
            )
            below.extend([item for item in items if isinstance(item, _CONTAINERS)])
        level = below
    return False


def check_value(value: object, what: str = "the value", limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``TooDeep`` when ``value`` nests more than ``limit`` levels."""
    if value_too_deep(value, limit):
        raise TooDeep(what, limit)


def outline(data: bytes | bytearray | str, keep: int = 2) -> Any:
    """The JSON ``data`` with every container deeper than ``keep`` levels replaced by
    ``null``: the envelope of a message too deep to parse (its ``id``, its ``method``).
    ``ValueError`` when what is left is not JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    kept: list[bytes] = []
    depth = 0
    start = 0  # where the text not yet copied begins
    cut_from = -1  # where the container being dropped began
    for token in _TOKEN.finditer(raw):
        mark = token.group()
        if mark[:1] == b'"':
            continue
        if mark in (b"[", b"{"):
            depth += 1
            if depth == keep + 1:
                kept.append(raw[start : token.start()])
                cut_from = token.start()
        else:
            if depth == keep + 1 and cut_from >= 0:
                kept.append(b"null")
                start = token.end()
                cut_from = -1
            depth -= 1
    if cut_from >= 0:
        raise ValueError("the text ends inside a container")
    kept.append(raw[start:])
    return json.loads(b"".join(kept))


_TOKEN: Final = re.compile(_STRING.pattern + rb"|[\[\]{}]", re.DOTALL)
