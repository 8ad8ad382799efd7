"""Removing secrets from audit events before anything is written (SPEC §10.6).

``scrub(value)`` returns a JSON-safe deep copy of a JSON-like value in which credentials are
replaced by ``"[REDACTED]"``:

- every value under a key that names a credential (``password``, ``api_key``, ``token``,
  ``Authorization``, ``Cookie``, ``clientSecret``...; see ``is_secret_keyword``), except
  placeholders such as ``"none"``, ``"Bearer"`` or ``"${TOKEN}"``, booleans and null;
- inside any string, only the secret part: the token after ``Bearer``/``Basic``, JWTs,
  known key shapes (``sk-...``, ``ghp_...``, ``AKIA...``, ``xox?-...``), PEM private keys,
  the password of ``scheme://user:password@host``, the value of ``password=...`` or
  ``"token": "..."`` written in text;
- long random-looking tokens (``looks_random``); in a path or URL only the random part.

Ordinary text stays readable: paths, URLs without a password, sentences, numbers, and
UUIDs and hex digests (request ids, grant ids and code hashes are what an audit trail is
read for; ``looks_random`` never takes them for secrets).

Hostile input is bounded: nesting deeper than ``MAX_DEPTH`` becomes ``TOO_DEEP``, a string
is cut at ``MAX_STRING`` characters, a container at ``MAX_ITEMS`` entries, the whole value
at ``MAX_NODES`` nodes and ``MAX_TOTAL_CHARS`` characters. Values JSON cannot hold become
text (sets and tuples become lists, NaN becomes ``"nan"``); NUL characters and lone
surrogates, which PostgreSQL and UTF-8 files refuse, become U+FFFD. Every pattern runs in
linear time.

    >>> scrub({"api_key": "sk-live-4f9a8b7c6d5e4f3a2b1c", "path": "/srv/app/main.py"})
    {'api_key': '[REDACTED]', 'path': '/srv/app/main.py'}
    >>> scrub("curl -H 'Authorization: Bearer 3f9a1c7e5b2d8f40a6c1' https://api.example.com")
    "curl -H 'Authorization: Bearer [REDACTED]' https://api.example.com"
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
from collections.abc import Mapping
from datetime import date, datetime, time
from enum import Enum
from itertools import islice
from pathlib import PurePath
from typing import Any, Final, cast
from uuid import UUID

from pml.analysis.credentials import is_secret_keyword, keyword_words
from pml.analysis.secret_text import redact_spans, secret_spans

logger = logging.getLogger(__name__)

REDACTED: Final = "[REDACTED]"
TOO_DEEP: Final = "[TRUNCATED: nested too deep]"
TRUNCATED: Final = "[TRUNCATED]"
MAX_DEPTH: Final = 16
MAX_STRING: Final = 4096
MAX_KEY: Final = 256
MAX_ITEMS: Final = 256
MAX_NODES: Final = 5000
MAX_TOTAL_CHARS: Final = 65536
_MAX_INT: Final = 2**63
# Texts already found to hold no secret: the same tool names, intents, rules and capability
# lists come back in every event of every request, and the regular expressions that look
# for secrets are most of an audit write's cost. Only clean texts are remembered (a text
# holding a secret is never kept), at most _CLEAN_MAX_ENTRIES of _CLEAN_MAX_CHARS each.
_CLEAN_MAX_ENTRIES: Final = 4096
_CLEAN_MAX_CHARS: Final = 512
_KNOWN_CLEAN: dict[str, None] = {}

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\{\{[^{}]*\}\}|\*+")
_PLACEHOLDER_WORDS = frozenset(
    {"", "none", "null", "true", "false", "bearer", "basic", "digest", "token", "redacted"}
    | {"oauth", "oauth2", "jwt", "apikey", "api_key", "yes", "no", "on", "off", "required"}
    | {"optional", "enabled", "disabled", REDACTED.lower()}
)


_COOKIE_WORDS = frozenset({"cookie", "cookies"})


class _Budget:
    """What is left of the nodes and characters one ``scrub`` call may produce."""

    __slots__ = ("chars", "nodes")

    def __init__(self) -> None:
        self.nodes = MAX_NODES
        self.chars = MAX_TOTAL_CHARS


def scrub(value: Any) -> Any:
    """A JSON-safe deep copy of ``value`` with secrets replaced by ``"[REDACTED]"``."""
    return _scrub(value, 0, named=False, budget=_Budget())


def scrub_text(text: str) -> str:
    """One string with its secrets replaced (bounded like a string inside ``scrub``)."""
    return _string(text, named=False, budget=_Budget())


def redact_secrets(text: str) -> str:
    """The secrets inside ``text`` replaced as ``scrub_text`` replaces them, nothing cut
    (for text whose length the caller already bounds, such as a stored intent)."""
    return _redact_text(str.__str__(text))


def _scrub(value: Any, depth: int, *, named: bool, budget: _Budget) -> Any:
    if budget.nodes <= 0:
        return TRUNCATED
    budget.nodes -= 1
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _string(value, named=named, budget=budget)
    if isinstance(value, int):
        return _integer(int.__int__(value), named=named)
    if isinstance(value, float):
        number = float.__float__(value)
        if named:
            return REDACTED
        return number if math.isfinite(number) else str(number)
    if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple | set | frozenset):
        return TOO_DEEP
    if isinstance(value, Mapping):
        return _mapping(cast("Mapping[object, object]", value), depth, named=named, budget=budget)
    if isinstance(value, list | tuple | set | frozenset):
        items = cast("list[object]", value)
        result = [
            _scrub(item, depth + 1, named=named, budget=budget) for item in islice(items, MAX_ITEMS)
        ]
        if len(items) > MAX_ITEMS:
            result.append(f"[TRUNCATED: {len(items) - MAX_ITEMS} more items]")
        return result
    return _string(_as_text(value), named=named, budget=budget)


def _mapping(
    value: Mapping[object, object], depth: int, *, named: bool, budget: _Budget
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, item in islice(value.items(), MAX_ITEMS):
        raw_key = key if isinstance(key, str) else _as_text(key)
        text_key = _string(raw_key[:MAX_KEY], named=False, budget=budget)
        secret = named or _names_secret(raw_key[:MAX_KEY])
        result[text_key] = _scrub(item, depth + 1, named=secret, budget=budget)
    if len(value) > MAX_ITEMS:
        result["[TRUNCATED]"] = f"{len(value) - MAX_ITEMS} more keys"
    return result


@functools.lru_cache(maxsize=2048)  # the same few keys come back in every event
def _names_secret(key: str) -> bool:
    """Whether a key names a credential: ``is_secret_keyword``, or a cookie header."""
    if is_secret_keyword(key):
        return True
    words = keyword_words(key)
    return bool(words) and words[-1] in _COOKIE_WORDS


def _integer(value: int, *, named: bool) -> int | str:
    if named:
        return REDACTED
    if -_MAX_INT <= value < _MAX_INT:
        return value
    return "[TRUNCATED: integer too large]"


def _as_text(value: object) -> str:
    """Text for a value JSON cannot hold (an object whose ``str`` fails becomes its type)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Enum):
        return _as_text(cast("object", value.value))
    if isinstance(value, PurePath | UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return f"[bytes: {len(value)}]"
    try:
        text = str(value)
    except Exception:  # any __str__ may fail; the event must still be written
        logger.warning("audit: a %s could not be printed", type(value).__name__, exc_info=True)
        return f"[unprintable {type(value).__name__}]"
    return text if type(text) is str else f"[unprintable {type(value).__name__}]"


def _is_placeholder(text: str) -> bool:
    stripped = text.strip()
    return stripped.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER.fullmatch(stripped) is not None


def _string(value: str, *, named: bool, budget: _Budget) -> str:
    if budget.chars <= 0:
        return TRUNCATED
    text = str.__str__(value)  # a str subclass cannot smuggle its own behaviour in
    limit = min(MAX_STRING, budget.chars)
    original = len(text)
    if original > limit:
        text = _cut(text, limit)
    dropped = original - len(text)
    if _UNSTORABLE.search(text) is not None:
        text = _UNSTORABLE.sub("\ufffd", text)
    if named and not _is_placeholder(text):
        budget.chars -= len(REDACTED)
        return REDACTED
    text = _redact_text(text)
    budget.chars -= limit if dropped else len(text)  # a cut string uses up its whole share
    if dropped:
        text += f"…[TRUNCATED: {dropped} more characters]"
    return text


def _cut(text: str, limit: int) -> str:
    """The first ``limit`` characters, without a token cut in half (it may be a secret)."""
    head = text[:limit]
    if limit < len(text) and not text[limit].isspace():
        end = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        head = head[: end + 1] if end >= 0 else ""
    return head


def _redact_text(text: str) -> str:
    """The secrets inside free text replaced, the rest kept as written."""
    if len(text) < 8 or text in _KNOWN_CLEAN:
        return text
    redacted = _redact_uncached(text)
    if redacted == text and len(text) <= _CLEAN_MAX_CHARS:
        _remember_clean(text)
    return redacted


def _remember_clean(text: str) -> None:
    """Remember ``text`` held no secret (the oldest entry makes room; safe across threads)."""
    if len(_KNOWN_CLEAN) >= _CLEAN_MAX_ENTRIES:
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # another thread won
            del _KNOWN_CLEAN[next(iter(_KNOWN_CLEAN))]
    _KNOWN_CLEAN[text] = None


def _redact_uncached(text: str) -> str:
    return redact_spans(text, secret_spans(text))
