"""Checking that values crossing the sandbox boundary are JSON data.

A snippet's result and the arguments of its tool calls must be JSON: ``None``, ``bool``,
``int``, finite ``float``, ``str``, lists (tuples become lists) and dicts with ``str`` keys.
Anything else (a set, bytes, an instance of a snippet class, ``nan``...) is refused with a
message that says where the offending value is.

Example::

    >>> json_value({"a": (1, 2.5, None)}, "result")
    {'a': [1, 2.5, None]}
    >>> json_value({"a": {1, 2}}, "result")
    Traceback (most recent call last):
    ...
    pml.sandbox.jsonvalue.NotJsonError: result['a'] is a set
    >>> json_size({"a": "é"})
    10
"""

from __future__ import annotations

import json
import math
from typing import Any, cast

from pml import wire_json

# Deeper values are refused rather than walked (the walk is recursive, and so is ``json``):
# PML's one limit on nesting (``pml.wire_json``), so what a snippet sends or returns can be
# read by every client and server (pydantic parses at most 200 levels).
MAX_JSON_DEPTH = wire_json.MAX_JSON_DEPTH
# ``json.dumps`` refuses integers of more than 4300 digits (CPython's int-to-str limit).
_MAX_INT_BITS = 14_000

_SCALARS = (str, bool, int, type(None))


class NotJsonError(ValueError):
    """A value that is not JSON data; the message names where it is (``result['a'][2]``)."""


def json_value(value: object, root: str) -> Any:
    """``value`` as JSON data (tuples become lists), or ``NotJsonError``."""
    if value is None or type(value) in (str, bool):
        return value
    path: list[str] = []
    try:
        return _convert(value, path, 0)
    except _Refused as refused:
        where = root + "".join(reversed(path))
        raise NotJsonError(f"{where} {refused.reason}") from None


def json_size(value: object) -> int:
    """Bytes of the compact UTF-8 JSON text of ``value`` (already checked JSON data)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return len(text.encode("utf-8"))


def bounded_json_size(value: object, stop_after: int) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (a raw tool result: JSON data), counted
    without building the text (escapes inside strings are not counted: a lower bound);
    the count stops soon after passing ``stop_after``."""
    size = 0
    pending: list[object] = [value]
    while pending and size <= stop_after:
        item = pending.pop()
        if isinstance(item, str):
            size += (len(item) if item.isascii() else len(item.encode("utf-8", "replace"))) + 2
        elif isinstance(item, dict):
            mapping = cast("dict[object, object]", item)
            size += 2 + max(0, 2 * len(mapping) - 1)  # braces, colons and commas
            pending.extend(mapping.keys())
            pending.extend(mapping.values())
        elif isinstance(item, list | tuple):
            items = cast("list[object] | tuple[object, ...]", item)
            size += 1 + max(1, len(items))  # brackets and commas
            pending.extend(items)
        elif item is None or isinstance(item, bool):
            size += 5 if item is False else 4
        else:
            size += len(repr(item)) if isinstance(item, int | float) else 2
    return size


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _convert(value: object, path: list[str], depth: int) -> Any:
    if isinstance(value, _SCALARS):
        if type(value) is int and value.bit_length() > _MAX_INT_BITS:  # pyright: ignore[reportUnnecessaryComparison]
            raise _Refused("is an integer too large for JSON")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(f"is a non-finite float ({value!r})")
        return value
    if depth >= MAX_JSON_DEPTH:
        raise _Refused(f"is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for index, item in enumerate(cast("list[object] | tuple[object, ...]", value)):
            try:
                items.append(_convert(item, path, depth + 1))
            except _Refused:
                path.append(f"[{index}]")
                raise
        return items
    if isinstance(value, dict):
        mapping: dict[str, Any] = {}
        for key, item in cast("dict[object, object]", value).items():
            if not isinstance(key, str):
                raise _Refused(f"has a key that is not a string: {_describe(key)} {key!r:.40}")
            try:
                mapping[key] = _convert(item, path, depth + 1)
            except _Refused:
                path.append(f"[{key!r}]")
                raise
        return mapping
    raise _Refused(f"is {_describe(value)}")


def _describe(value: object) -> str:
    """``a set``, ``bytes``, ``an instance of class Point``, ``the builtin open``."""
    kind = type(value).__name__
    name = getattr(value, "name", None)
    if kind in _PROXIES and isinstance(name, str):
        return f"{_PROXIES[kind]} {name}"
    if kind == "bytes":
        return "bytes"
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


# How pydantic-monty hands back sandbox objects that have no JSON (or Python) equivalent.
_PROXIES = {
    "MontyClassProxy": "an instance of class",
    "MontyClassTypeProxy": "the class",
    "MontyStdTypeProxy": "the builtin",
}
