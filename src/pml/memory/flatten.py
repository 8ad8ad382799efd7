"""The text a memory write would store, from its tool arguments.

    >>> memory_text({"entities": [{"name": "card", "entityType": "fact",
    ...     "observations": ["my card number is 4111 1111 1111 1111"]}]})
    'card\\nfact\\nmy card number is 4111 1111 1111 1111'
    >>> memory_text({"home_address": "12 Rue de la Paix"})
    'home_address: 12 Rue de la Paix'

Every string and number of a nested JSON-like value, depth first, one per line. A key is
written before its value (``key: value``) unless it is one of the field names memory
servers use for structure (``name``, ``entityType``, ``observations``...): a key such as
``password`` or ``home_address`` says what its value is, and the classifier must see it.
Bounded: ``MAX_DEPTH`` levels (deeper values are skipped, never a ``RecursionError``),
``MAX_NODES`` values, ``MAX_CHARS`` characters (the classifier's credential bound).
Booleans and null are skipped; values JSON cannot hold are skipped too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, cast

MAX_DEPTH: Final = 32
MAX_NODES: Final = 10_000
MAX_CHARS: Final = 200_000

# Field names of memory servers' write tools (compared without case and punctuation).
STRUCTURAL_KEYS: Final = frozenset(
    {
        "name",
        "entitytype",
        "observations",
        "contents",
        "content",
        "text",
        "value",
        "values",
        "entities",
        "relations",
        "from",
        "to",
        "relationtype",
        "entityname",
        "entitynames",
        "type",
        "id",
        "memory",
        "memories",
        "fact",
        "facts",
        "note",
        "notes",
        "data",
        "items",
        "item",
        "message",
        "messages",
        "deletions",
        "key",
        "title",
        "body",
        "tags",
        "metadata",
        "observation",
        "input",
        "query",
    }
)
_NOT_ALNUM = re.compile(r"[\W_]+")


def _meaningful(key: str) -> bool:
    return _NOT_ALNUM.sub("", key.casefold()) not in STRUCTURAL_KEYS


def memory_text(arguments: Mapping[str, Any]) -> str:
    """The strings of ``arguments`` (keys too where meaningful), one per line (see module)."""
    parts: list[str] = []
    budget = MAX_CHARS
    nodes = 0
    stack: list[tuple[str | None, object, int]] = [(None, arguments, 0)]
    while stack and budget > 0 and nodes < MAX_NODES:
        key, value, depth = stack.pop()
        nodes += 1
        line = _scalar(value)
        if line is not None:
            text = f"{key}: {line}" if key is not None else line
        elif isinstance(value, Mapping | list | tuple):
            text = f"{key}:" if key is not None else ""
            if depth < MAX_DEPTH:
                stack.extend(reversed(_children(cast(object, value), depth + 1)))
        else:
            continue
        if text:
            parts.append(text[:budget])
            budget -= len(parts[-1]) + 1
    return "\n".join(parts)


def _scalar(value: object) -> str | None:
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        number = int.__int__(value)
        return str(number) if abs(number) < 10**40 else None  # no 4 300-digit conversions
    if isinstance(value, float):
        return repr(float.__float__(value))
    return None


def _children(value: object, depth: int) -> list[tuple[str | None, object, int]]:
    """The members of a mapping or list, at most ``MAX_NODES`` of them, in order."""
    children: list[tuple[str | None, object, int]] = []
    if isinstance(value, Mapping):
        for key, item in cast(Mapping[object, object], value).items():
            if len(children) >= MAX_NODES:
                break
            named = key if isinstance(key, str) and _meaningful(key) else None
            children.append((str.__str__(named)[:200] if named else None, item, depth))
    else:
        for item in cast(list[object], value)[:MAX_NODES]:
            children.append((None, item, depth))
    return children
