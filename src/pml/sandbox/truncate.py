"""Cutting text to a byte bound, with a marker that says how much was left out.

Error messages (a snippet's exception, an upstream tool's error text) count against the
SPEC §4 bounds: they are cut to :func:`error_bytes` of UTF-8, at a character boundary (and
never between a character and the combining marks that follow it), so the result is
always valid UTF-8 and valid JSON. Sizes are checked without encoding a huge text whole.

Example::

    >>> bounded_text("é" * 40, 50)
    'ééééééé… [truncated: 33 more characters]'
    >>> bounded_text("short", 100)
    'short'
"""

from __future__ import annotations

import unicodedata

from pml.config import SandboxSettings

MAX_ERROR_BYTES = 65_536
"""An error message never exceeds this (nor ``max_result_bytes``, when that is smaller)."""

_ELLIPSIS = "…"
TRUNCATION_MARK = f"{_ELLIPSIS} [truncated: "
"""What every cut text carries."""


def error_bytes(limits: SandboxSettings) -> int:
    """The byte bound of one error message under ``limits``."""
    return min(limits.max_result_bytes, MAX_ERROR_BYTES)


def utf8_size(text: str) -> int:
    """Bytes of ``text`` as UTF-8 (lone surrogates count as the 3 bytes JSON escapes cost
    at least)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def fits(text: str, max_bytes: int) -> bool:
    """Whether ``text`` is at most ``max_bytes`` of UTF-8, without encoding a huge text."""
    if len(text) > max_bytes:  # every character is at least one byte
        return False
    if len(text) * 4 <= max_bytes:  # and at most four
        return True
    return utf8_size(text) <= max_bytes


def bounded_text(text: str, max_bytes: int, *, more_chars: int = 0) -> str:
    """``text`` if it fits in ``max_bytes``, else its head and a ``[truncated: N more
    characters]`` marker, the whole within ``max_bytes`` (``more_chars``: characters
    already cut before ``text`` was given)."""
    if more_chars == 0 and fits(text, max_bytes):
        return text
    longest = _marker(len(text) + more_chars)
    room = max_bytes - utf8_size(longest)
    if room < 0:  # a bound too small for the marker: the head and an ellipsis
        end = _cut(text, max_bytes - utf8_size(_ELLIPSIS))
        return text[:end] + _ELLIPSIS if max_bytes >= utf8_size(_ELLIPSIS) else ""
    end = _cut(text, room)
    return text[:end] + _marker(len(text) - end + more_chars)


def _marker(more: int) -> str:
    return f"{TRUNCATION_MARK}{more} more characters]"


def _cut(text: str, max_bytes: int) -> int:
    """The length of the longest head of ``text`` within ``max_bytes`` of UTF-8 that ends
    on a whole character: not inside a UTF-8 sequence, not on a lone high surrogate, not
    between a character and the combining marks that follow it."""
    if max_bytes <= 0:
        return 0
    head = text[:max_bytes]  # no more characters than bytes can fit
    data = head.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        end = len(head)
    else:
        cut = max_bytes
        while cut > 0 and (data[cut] & 0xC0) == 0x80:  # a continuation byte
            cut -= 1
        end = len(data[:cut].decode("utf-8", "surrogatepass"))
    while end > 0 and (
        "\ud800" <= text[end - 1] <= "\udbff"
        or (end < len(text) and unicodedata.combining(text[end]) != 0)
    ):
        end -= 1
    return end
