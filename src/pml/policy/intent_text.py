"""The normalised word string the intent rules read (``pml.policy.intent_rules``).

    >>> word_string("Read ~/notes/TODO.md then open https://example.com/a")
    'read zzpath then open zzurl'

NFKD, accents and invisible format characters (zero-width, bidi controls) dropped,
case-folded; URLs and file paths replaced by markers (``URL_MARK``, ``PATH_MARK``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

URL_MARK: Final = "zzurl"
PATH_MARK: Final = "zzpath"
_WORD = re.compile(r"[^\W_]+")
_TOKEN_EDGES: Final = "\"'`()[]{}<>,;!?“”‘’«»"


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_TLDS: Final = _set(
    "com org net io dev ai co edu gov fr de uk eu info app me tv ca us jp be ch nl es it ru cn "
    "in br au news blog site online tech cloud"
)
_FILE_EXTS: Final = _set(
    "json jsonl csv tsv txt md rst yaml yml toml ini cfg conf log xml html htm pdf doc docx "
    "xls xlsx ppt pptx odt py pyi js ts tsx jsx sh bash zsh sql db sqlite env lock rs go java "
    "kt c h cpp hpp cs rb php swift png jpg jpeg gif svg webp zip tar gz tgz parquet ipynb "
    "css scss vue tf pem key bak tmp out"
)


def word_string(text: str) -> str:
    """The normalised word string of ``text``: URLs and paths become markers, the rest
    lower-case words without accents or invisible characters, joined by single spaces."""
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(
        char
        for char in decomposed
        if not unicodedata.combining(char) and unicodedata.category(char) != "Cf"
    ).casefold()
    out: list[str] = []
    for raw in kept.split():
        token = raw.strip(_TOKEN_EDGES).rstrip(".:")
        kind = _token_kind(token)
        if kind is not None:
            out.append(kind)
        else:
            out.extend(_WORD.findall(raw))
    return " ".join(out)


def _token_kind(token: str) -> str | None:
    """``URL_MARK``, ``PATH_MARK``, or None for an ordinary token."""
    if not token:
        return None
    if token.startswith("file://"):
        return PATH_MARK
    if token.startswith(("http://", "https://", "ftp://", "www.")):
        return URL_MARK
    if token == "~" or token.startswith(("/", "~/", "./", "../", "~\\", ".\\")):
        return PATH_MARK
    if _is_windows_path(token):
        return PATH_MARK
    if "*" in token and ("." in token or "/" in token):
        return PATH_MARK
    head = token.split("/", 1)[0]
    labels = head.split(".")
    if (
        len(labels) >= 2
        and labels[-1] in _TLDS
        and all(label and label.replace("-", "").isalnum() for label in labels)
    ):
        return URL_MARK
    if (token.endswith("/") and len(token) > 1) or token.count("/") >= 2:
        return PATH_MARK
    name = token.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    if dot and ext in _FILE_EXTS and (stem or name.startswith(".")):
        return PATH_MARK
    if dot and not stem and ext.isalpha() and len(ext) > 1 and name.startswith("."):
        return PATH_MARK  # a dotfile: .bashrc, .gitignore
    return None


def _is_windows_path(token: str) -> bool:
    return len(token) > 2 and token[0].isalpha() and token[1] == ":" and token[2] in "\\/"
