"""Words of tool and capability texts, the way the lexical index and the fallback embedder
see them.

    >>> terms("readTextFile: Read the contents of files")
    ['read', 'text', 'file', 'read', 'content', 'file']

Identifiers are split (``camelCase``, ``snake_case``, ``kebab-case``, ``server:tool``),
text is lower-cased, common English words are dropped, and a light stemmer folds plurals
and ``-ing``/``-ed`` forms so that "files", "listing" and "listed" meet "file" and "list".
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+")
MAX_TERMS: Final = 4000  # a huge text is indexed by its first words only

STOP_WORDS: Final = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "with",
        "my",
        "me",
        "i",
        "you",
        "your",
        "it",
        "its",
        "is",
        "are",
        "be",
        "been",
        "was",
        "were",
        "this",
        "that",
        "these",
        "those",
        "from",
        "by",
        "as",
        "at",
        "into",
        "about",
        "some",
        "any",
        "all",
        "can",
        "could",
        "would",
        "should",
        "will",
        "do",
        "does",
        "did",
        "please",
        "want",
        "need",
        "like",
        "just",
        "then",
        "than",
        "so",
        "if",
        "when",
        "what",
        "which",
        "who",
        "how",
        "there",
        "here",
        "get",
        "let",
        "use",
        "using",
        "via",
        "s",
    ]
)


def stem(word: str) -> str:
    """A light, predictable English stemmer (plurals, -ing, -ed, -ies)."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, replacement, keep in (
        ("ies", "y", 3),
        ("sses", "ss", 3),
        ("ing", "", 4),
        ("ed", "", 4),
        ("es", "", 4),
        ("s", "", 3),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            if suffix in ("es",) and not word.endswith(("ches", "shes", "xes", "sses", "zes")):
                return word[:-1]
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            return word[: len(word) - len(suffix)] + replacement
    return word


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``, identifiers split, stop words kept."""
    normal = unicodedata.normalize("NFKC", text)
    found: list[str] = []
    for token in _WORD.findall(normal):
        for part in _CAMEL.split(token):
            if part:
                found.append(part.lower())
                if len(found) >= MAX_TERMS:
                    return found
    return found


def terms(text: str) -> list[str]:
    """The index terms of ``text``: words without stop words, stemmed."""
    return [stem(word) for word in words(text) if word not in STOP_WORDS]
