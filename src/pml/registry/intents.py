"""Remembered intents: the distinct ways a capability was asked for (pure rules, no I/O).

    found = intent_text("  Read the JSON config  ")    # IntentText(text=..., text_hash=...)
    sighting = sighted(fqdn, "read the json config", "reuse", "ada", utc_now())  # ~1 µs
    stored = settled(sighting)                         # scrubbed, bounded, normalised hash
    gone = to_drop(kept, similarities)                 # text hashes the bound drops

A capability keeps the intents that led to it: at capture, when the same code runs again
under another intent, when it is called by name in a ``pml_execute`` stating an intent, a
new version, and the description given at a rename. A sighting is queued as given (the
answer's path only cuts and hashes it); before anything is stored it is

- **scrubbed** as the audit scrubs (``pml.policy.scrub.scrub_text``: known key shapes,
  ``Bearer`` tokens, JWTs, passwords in URLs and assignments, long random tokens), so a
  secret pasted into an intent is never stored;
- **bounded**: NUL and other control characters become spaces, the text is cut at
  ``MAX_TEXT`` characters (at a space, never inside a word) and marked with ``…``;
- **normalised** for identity: Unicode NFKC, case-folded, punctuation dropped, whitespace
  collapsed; its SHA-256 is the row's ``text_hash``. The same normalised text counts a use.
  Text with nothing left to compare (only punctuation, only a redacted secret) is not kept.

Deduplication by meaning and the bound take a ``MeaningCheck`` (an embedding model in the
gateway, see ``pml.wiring``): a new intent whose cosine with a kept one is at least
``SAME_MEANING`` counts as a use of that one. At most ``MAX_KEPT`` are kept per capability:
past it, the one dropped is the least recently seen among the most redundant (closest to
another kept one); the most recent one always stays. Without a meaning check, redundancy is
the overlap of their words (``lexical_similarities``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol

from pml.policy.scrub import REDACTED, scrub_text

MAX_KEPT: Final = 8
MAX_TEXT: Final = 500
# Longer input is cut (at a space) before scrubbing: what is kept is MAX_TEXT long anyway.
MAX_INPUT: Final = 2 * MAX_TEXT
SAME_MEANING: Final = 0.9
# How much being older weighs against being redundant when the bound drops one.
STALENESS_WEIGHT: Final = 0.5
SOURCES: Final = ("capture", "reuse", "call", "update", "rename")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufffd]+")
_NOT_WORD = re.compile(r"[\W_]+")
_REDACTED_WORD = _NOT_WORD.sub(" ", REDACTED.casefold()).strip()


@dataclass(frozen=True, slots=True)
class IntentText:
    """An intent as it is stored (scrubbed, bounded) and the hash of its normalised form."""

    text: str
    text_hash: str


@dataclass(frozen=True, slots=True)
class IntentSighting:
    """One intent a capability was reached with: its text and a hash (as given when queued,
    ``sighted``; scrubbed, bounded and the SHA-256 of its normalised form once ``settled``),
    how (one of ``SOURCES``), by whom, when (the latest of ``uses`` sightings)."""

    fqdn: str
    text: str
    text_hash: str
    source: str
    user: str
    seen_at: datetime
    uses: int = 1  # sightings of the same text queued together


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """One remembered intent of a capability."""

    text: str
    source: str
    created_by: str
    first_seen_at: datetime
    last_seen_at: datetime
    uses: int

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``cap_whois``/``cap_history``'s ``intents`` entries."""
        return {
            "text": self.text,
            "source": self.source,
            "first_seen_at": self.first_seen_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "uses": self.uses,
        }


@dataclass(frozen=True, slots=True)
class Kept:
    """What the bound weighs of one kept intent."""

    text_hash: str
    text: str
    last_seen_at: datetime


class MeaningCheck(Protocol):
    """How alike texts are in meaning (an embedding model's cosine similarities)."""

    async def similarities(self, texts: Sequence[str]) -> list[list[float]]:
        """The symmetric matrix of cosine similarities of ``texts`` (1.0 on the diagonal)."""
        ...


def normalised(text: str) -> str:
    """The form two intents are compared in: NFKC, case-folded, words only, one space."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NOT_WORD.sub(" ", folded).split())


def intent_text(raw: object) -> IntentText | None:
    """``raw`` as it may be stored, or None when it is not text or holds nothing to keep."""
    if not isinstance(raw, str):
        return None
    text = _cut(str.__str__(raw), MAX_INPUT)
    text = " ".join(_CONTROL.sub(" ", scrub_text(text)).split())
    if len(text) > MAX_TEXT:
        text = _cut(text, MAX_TEXT - 1).rstrip() + "…"
    key = normalised(text)
    if not key.replace(_REDACTED_WORD, " ").strip():
        return None
    return IntentText(text, hashlib.sha256(key.encode()).hexdigest())


def sighted(
    fqdn: str, raw: object, source: str, user: str, seen_at: datetime
) -> IntentSighting | None:
    """The sighting of ``raw`` for ``fqdn``, as it is queued on an answer's path: the text as
    given (cut at ``MAX_INPUT``), keyed by its own hash, in about a microsecond. Nothing is
    stored before ``settled`` scrubs, bounds and normalises it (None: not text, or blank)."""
    if not isinstance(raw, str):
        return None
    text = _cut(str.__str__(raw), MAX_INPUT)
    if not text.strip():
        return None
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return IntentSighting(fqdn, text, key, source[:16], user[:128], seen_at)


def settled(sighting: IntentSighting) -> IntentSighting | None:
    """``sighting`` as it may be stored: scrubbed, bounded, keyed by the hash of its
    normalised text (``intent_text``); None when nothing is left to keep. Settling a
    settled sighting changes nothing."""
    found = intent_text(sighting.text)
    if found is None:
        return None
    return replace(sighting, text=found.text, text_hash=found.text_hash)


def _cut(text: str, limit: int) -> str:
    """The first ``limit`` characters, ending at a space when a word would be cut (a cut
    token may be the part of a secret its pattern no longer recognises)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if text[limit].isspace():
        return head
    end = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:end] if end > 0 else ""


def lexical_similarities(texts: Sequence[str]) -> list[list[float]]:
    """How much each pair of ``texts`` shares its words (Jaccard): the measure of redundancy
    without a meaning check."""
    words = [set(normalised(text).split()) for text in texts]
    return [
        [1.0 if a is b else (len(a & b) / len(a | b) if a and b else 0.0) for b in words]
        for a in words
    ]


def same_meaning(row: Sequence[float], candidates: Sequence[int]) -> int | None:
    """Among ``candidates`` (indexes into ``row``), the closest with a similarity of at least
    ``SAME_MEANING``, or None."""
    best: int | None = None
    for index in candidates:
        if row[index] >= SAME_MEANING and (best is None or row[index] > row[best]):
            best = index
    return best


def to_drop(
    kept: Sequence[Kept],
    similarities: Sequence[Sequence[float]],
    *,
    max_kept: int = MAX_KEPT,
) -> list[str]:
    """The text hashes to drop so that at most ``max_kept`` remain (see module):
    repeatedly the one with the highest similarity to its nearest other plus
    ``STALENESS_WEIGHT`` times its age rank (0 newest, 1 oldest); never the newest.

    ``similarities[i][j]``: how alike ``kept[i]`` and ``kept[j]`` are (0..1)."""
    limit = max(max_kept, 1)
    # Newest first (ties: by hash, so every replica picks the same ones).
    alive = sorted(
        range(len(kept)), key=lambda i: (kept[i].last_seen_at, kept[i].text_hash), reverse=True
    )
    dropped: list[str] = []
    while len(alive) > limit:
        span = len(alive) - 1
        best_weight, victim = -1.0, 1
        for position in range(1, len(alive)):
            index = alive[position]
            nearest = max(similarities[index][other] for other in alive if other != index)
            weight = nearest + STALENESS_WEIGHT * position / span
            if weight >= best_weight:  # ties: the older one
                best_weight, victim = weight, position
        dropped.append(kept[alive.pop(victim)].text_hash)
    return dropped
