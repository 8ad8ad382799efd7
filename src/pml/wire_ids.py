"""A JSON-RPC message's id and kind read from its ends, without parsing the message.

A message too large or too deep to parse still deserves an answer for its id, so that the
call it answers (or the request it is) ends at once instead of waiting for a timeout. The
id is found where writers put it: near the start (``{"jsonrpc", "id", "method" | "result",
...}``, as Python's SDK writes) or as the last member (``{"result": ..., "jsonrpc", "id"}``,
as the TypeScript SDK writes answers)::

    >>> leading_id(b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [')
    7
    >>> trailing_id(b'..."text": "x"}]}, "jsonrpc": "2.0", "id": "call-7"}\\r')
    'call-7'
    >>> is_answer(b'{"result": {"content": [{"type": "text", "text": "x')
    True
    >>> is_answer(b'{"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage", "params": {')
    False

Only the standard library: any layer may use it (the gateway's stdio, the upstream's).
"""

from __future__ import annotations

import json
import re
from typing import Final

# How much of a message's start is looked at (the envelope's members come first).
HEAD_BYTES: Final = 1024

# ``"id": 7`` or ``"id": "abc"`` at the top level, before the first nested value.
_LEADING_ID: Final = re.compile(
    rb'"id"[ \t]*:[ \t]*(-?[0-9]{1,18}(?![0-9.eE])|"(?:[^"\\]|\\.){0,256}")'
)
# ``, "id": 7}`` closing the message: the last member of the outermost object (the line's
# final brace can close nothing else).
_TRAILING_ID: Final = re.compile(
    rb'[{,][ \t]*"id"[ \t]*:[ \t]*(-?[0-9]{1,18}|"(?:[^"\\]|\\.){0,256}")[ \t]*\}[ \t\r]*\Z'
)
_ANSWER_KEY: Final = re.compile(rb'"(?:result|error)"[ \t]*:')
_METHOD_KEY: Final = re.compile(rb'"method"[ \t]*:')


def top_level_head(line: bytes) -> bytes:
    """The start of a message's outermost object, up to its first nested value (1 KiB)."""
    start = line.find(b"{", 0, HEAD_BYTES)
    if start < 0:
        return b""
    head = line[start : start + HEAD_BYTES]
    nested = [at for at in (head.find(b"{", 1), head.find(b"[", 1)) if at >= 0]
    return head[: min(nested, default=len(head))]


def leading_id(line: bytes) -> int | str | None:
    """The id of a message when it comes before the first nested value."""
    match = _LEADING_ID.search(top_level_head(line))
    return None if match is None else _id_value(match[1])


def trailing_id(tail: bytes) -> int | str | None:
    """The id of a message whose last member it is (``tail``: the message's last bytes)."""
    match = _TRAILING_ID.search(tail)
    return None if match is None else _id_value(match[1])


def is_answer(line: bytes) -> bool:
    """Whether a message's start shows an answer (``result`` or ``error``), not a request."""
    head = top_level_head(line)
    return _ANSWER_KEY.search(head) is not None and _METHOD_KEY.search(head) is None


def _id_value(text: bytes) -> int | str | None:
    try:
        value: object = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None
