"""What a ``pml_discover`` result says of its description and input schema: enough to pick
and call it, nothing an agent pays for and never uses.

    short_description("Read a file. Handles encodings. Only works in allowed directories.")
    # -> "Read a file. Handles encodings. Only works in allowed directories." (fits: whole)
    lean_schema({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})
    # -> {"type": "object"}

A description keeps its first sentences that fit in ``DESCRIPTION_CHARS``; when even the
first does not fit, it is cut at the last space before the limit and ends with ``…``
(a single word longer than the limit, or text without spaces such as Chinese, is cut at
the limit, never between a character and its combining marks). Sentences end at ``.``,
``!`` or ``?`` followed by a space and anything but a lower-case letter ("e.g. a file" is
one sentence), at ``。！？`` and at a blank line; a single line break is only wrapping.

A schema loses what no caller needs: ``$schema`` and ``$comment`` everywhere, ``$id`` and
``title`` at its top, and a ``title`` that only repeats its property's name ("Sort By"
for ``sort_by``, as pydantic writes them). Types, descriptions, enums, defaults, required,
``$defs`` and ``$ref`` stay. Neither function changes what it is given.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final, cast

DESCRIPTION_CHARS: Final = 160
CUT_MARK: Final = "…"
# A description is read this far (a 100 KB one costs no more than a short one).
_READ_CHARS: Final = DESCRIPTION_CHARS * 4
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?![a-z])|(?<=[。！？])\s*")
_PARAGRAPH = re.compile(r"\n\s*\n")
_ENDS: Final = tuple(".!?:;…")
_WIDE_ENDS: Final = tuple("。！？")  # full-width: no space after them
_SCHEMA_MAX_DEPTH: Final = 32
_NOISE: Final = frozenset({"$schema", "$comment"})
_TOP_NOISE: Final = frozenset({"$id", "title"})
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_KEYS: Final = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
    }
)
_SCHEMA_LISTS: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems", "items"})


def short_description(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """The first sentences of ``text`` that fit in ``limit`` characters (see module)."""
    stripped = text.lstrip()
    head = stripped[:_READ_CHARS]
    truncated = len(stripped) > len(head)
    segments: list[str] = []
    for paragraph in _PARAGRAPH.split(head):
        flat = " ".join(paragraph.split())
        segments.extend(part for part in _SENTENCE_END.split(flat) if part)
    kept = ""
    for position, segment in enumerate(segments):
        whole = not (truncated and position == len(segments) - 1)
        joiner = "" if kept.endswith(_WIDE_ENDS) else " " if kept.endswith(_ENDS) else ". "
        candidate = f"{kept}{joiner}{segment}" if kept else segment
        if whole and len(candidate) <= limit:
            kept = candidate
            continue
        return kept or _cut(segment, limit)
    return kept


def _cut(text: str, limit: int) -> str:
    """``text`` cut before ``limit`` characters at a word boundary, with the mark."""
    room = max(limit - len(CUT_MARK), 1)
    if len(text) <= room:
        return text + CUT_MARK
    space = text.rfind(" ", 0, room + 1)
    if space > 0:
        return text[:space].rstrip(" ,;:-—–") + CUT_MARK
    end = room
    while end > 1 and _joins_previous(text[end]):
        end -= 1  # never part a character from its marks (or a surrogate from its pair)
    return text[:end] + CUT_MARK


def _joins_previous(char: str) -> bool:
    return (
        unicodedata.combining(char) != 0
        or char in "\u200c\u200d"
        or "\ufe00" <= char <= "\ufe0f"
        or "\udc00" <= char <= "\udfff"
        or unicodedata.category(char) == "Mc"
    )


def lean_schema(schema: object) -> dict[str, Any]:
    """``schema`` without the keys no caller needs (see module); ``{}`` for a non-object."""
    if not isinstance(schema, dict):
        return {}
    return _lean(cast("dict[str, Any]", schema), name=None, depth=0)


def _lean(node: dict[str, Any], *, name: str | None, depth: int) -> dict[str, Any]:
    if depth > _SCHEMA_MAX_DEPTH:
        return node
    lean: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NOISE or (depth == 0 and key in _TOP_NOISE):
            continue
        if key == "title" and name is not None and _repeats(value, name):
            continue
        lean[key] = _lean_value(key, value, depth)
    return lean


def _lean_value(key: str, value: object, depth: int) -> object:
    if key in _SCHEMA_MAPS and isinstance(value, dict):
        schemas = cast("dict[str, Any]", value)
        return {
            str(sub): _lean(cast("dict[str, Any]", child), name=str(sub), depth=depth + 1)
            if isinstance(child, dict)
            else child
            for sub, child in schemas.items()
        }
    if key in _SCHEMA_KEYS and isinstance(value, dict):
        return _lean(cast("dict[str, Any]", value), name=None, depth=depth + 1)
    if key in _SCHEMA_LISTS and isinstance(value, list):
        return [
            _lean(cast("dict[str, Any]", child), name=None, depth=depth + 1)
            if isinstance(child, dict)
            else child
            for child in cast("list[Any]", value)
        ]
    return value


def _repeats(title: object, name: str) -> bool:
    """Whether ``title`` only says ``name`` again ("Sort By" for ``sort_by``)."""
    if not isinstance(title, str):
        return False
    folded = " ".join(title.replace("_", " ").split()).casefold()
    return folded == " ".join(name.replace("_", " ").split()).casefold()
