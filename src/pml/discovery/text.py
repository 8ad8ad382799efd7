"""Words of tool and capability texts, the way the lexical index and the fallback embedder
see them.

    >>> terms("readTextFile: Read the contents of files")
    ['read', 'text', 'file', 'read', 'content', 'file']

Identifiers are split (``camelCase``, ``snake_case``, ``kebab-case``, ``server:tool``),
text is lower-cased, common English words are dropped, and a light stemmer folds plurals
and ``-ing``/``-ed`` forms so that "files", "listing" and "listed" meet "file" and "list"
(stems need not be words: "create" and "creating" both become "creat").
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Final

_CHUNK = re.compile(r"[^\W_]+")  # runs of letters and digits: splits snake_, kebab-, dot.case
# Inside a chunk: ACRONYM (before a Capitalised word), Capitalised or lower words.
_CAMEL = re.compile(r"[A-Z]+(?![^\W_A-Z])|[A-Z]?[^\W_A-Z]+")
_UNDOUBLE: Final = frozenset("bdfgmnprt")
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


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light suffix stemmer: plural ``s``, ``ing``, ``ed`` and a final ``e``."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and word[-2] not in "sui":
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] in _UNDOUBLE:
                word = word[:-1]  # mapped -> map, running -> run
            break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]  # create / created / creating -> creat
    return word


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (at most ``MAX_TERMS``), identifiers split."""
    found: list[str] = []
    for chunk in _CHUNK.findall(unicodedata.normalize("NFKC", text)):
        for part in _CAMEL.findall(chunk) or [chunk]:
            found.append(part.lower())
        if len(found) >= MAX_TERMS:
            return found[:MAX_TERMS]
    return found


def terms(text: str) -> list[str]:
    """The index terms of ``text``: words without stop words, stemmed."""
    return [stem(word) for word in words(text) if word not in STOP_WORDS]
