"""The facts PML remembers for a person, one scope's user at a time (SPEC §13).

    store = MemoryStore(db)
    fact, new = await store.add(scope, "I prefer metric units", sensitivity="low",
                                source="agent", request_id="req-1")
    await store.add(scope, "i prefer  metric units", ...)   # (the same fact, False)
    await store.recent(scope, 20)                           # newest first
    await store.list(scope, query="metric")                 # newest first, text search
    await store.forget(scope, fact.id)                      # True; False when not theirs

Rules:

- The text is stripped (``\\r\\n`` read as ``\\n``); empty, over ``MAX_TEXT_CHARS``
  (2 000) characters, or holding control characters other than newline and tab is
  ``InvalidInput``.
- A credential is never stored: ``PermissionDenied`` when the caller says
  ``credential`` or when ``classify_text`` finds one in the text whatever the caller said.
  The stored sensitivity is the more sensitive of the caller's and the heuristics'.
- The same fact (the same text once normalised: NFKC, invisible characters dropped,
  case-folded, whitespace joined) is stored once per user: adding it again returns the
  stored one and ``False`` (raising its stored sensitivity if the new one is higher).
- A user holds at most ``max_facts`` facts: one more is ``LimitExceeded``. (Two
  replicas adding at the same moment on PostgreSQL can pass the limit by one each.)
- Everything is fenced to the scope's org, project and user: another user's fact is
  never read, listed or forgotten.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy.exc import IntegrityError

from pml.agent.model import Sensitivity
from pml.errors import InvalidInput, LimitExceeded, PermissionDenied
from pml.memory.sensitivity import LEVELS, classify_text, normalise
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.memory_repo import MemoryRepository, Row
from pml.storage.types import utc_now

MAX_TEXT_CHARS: Final = 2_000
MAX_LIST: Final = 1_000
MAX_QUERY_CHARS: Final = 200
MIN_ID_PREFIX: Final = 4
_SOURCE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_REQUEST_ID = re.compile(r"[!-~]{1,64}")  # printable ASCII, no spaces
_ALLOWED_CONTROLS = frozenset("\n\t")


@dataclass(frozen=True, slots=True)
class MemoryFact:
    """One remembered fact of a person."""

    id: str
    text: str
    sensitivity: Sensitivity
    source: str
    request_id: str | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "text", "sensitivity", "source", "request_id", "created_at"}`` (ISO 8601)."""
        return {
            "id": self.id,
            "text": self.text,
            "sensitivity": self.sensitivity,
            "source": self.source,
            "request_id": self.request_id,
            "created_at": self.created_at.isoformat(),
        }


def fact_hash(text: str) -> str:
    """The SHA-256 that makes two writings of one fact the same fact."""
    key = " ".join(normalise(text).casefold().split())
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


class MemoryStore:
    """Adds, lists and forgets a person's remembered facts (see module for the rules)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self,
        scope: Scope,
        text: str,
        *,
        sensitivity: Sensitivity,
        source: str,
        request_id: str | None = None,
        max_facts: int = 10_000,
    ) -> tuple[MemoryFact, bool]:
        """Store a fact; ``(fact, True)`` when new, ``(stored fact, False)`` when known.

        ``InvalidInput`` for a bad text, sensitivity, source or request id;
        ``PermissionDenied`` for a credential; ``LimitExceeded`` past ``max_facts``."""
        _check_scope(scope)
        clean = check_text(text)
        level = _stored_level(clean, sensitivity)
        _check_source(source, request_id)
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput(f"max_facts must be a positive integer, not {max_facts!r}.")
        digest = fact_hash(clean)
        values = {
            "id": str(uuid.uuid4()),
            "org": scope.org,
            "project": scope.project,
            "user_id": scope.user,
            "text": clean,
            "sensitivity": level,
            "source": source,
            "request_id": request_id,
            "created_at": utc_now(),
            "text_hash": digest,
        }
        try:
            async with self._db.transaction() as conn:
                repo = MemoryRepository(conn)
                known = await repo.by_hash(scope, digest)
                if known is not None:
                    return await _known(repo, scope, known, level), False
                if await repo.count(scope) >= max_facts:
                    raise LimitExceeded(
                        f"You have {max_facts} memories, the most allowed ([memory] max_facts):"
                        " forget some first (pml memory forget ID).",
                        limit=max_facts,
                    )
                await repo.insert(values)
        except IntegrityError:  # the same fact, added at the same moment elsewhere
            async with self._db.transaction() as conn:
                repo = MemoryRepository(conn)
                known = await repo.by_hash(scope, digest)
                if known is None:
                    raise
                return await _known(repo, scope, known, level), False
        return _fact(values), True

    async def recent(self, scope: Scope, limit: int) -> list[MemoryFact]:
        """The scope's user's newest ``limit`` facts, newest first ([] for 0 or less)."""
        _check_scope(scope)
        if isinstance(limit, bool) or not isinstance(limit, int):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput(f"limit must be an integer, not {limit!r}.", field="limit")
        if limit <= 0:
            return []
        return await self._newest(scope, min(limit, MAX_LIST), None)

    async def list(
        self, scope: Scope, *, limit: int = 100, query: str | None = None
    ) -> list[MemoryFact]:
        """The scope's user's facts, newest first; with ``query``, those whose text holds it
        (case-insensitive). ``limit`` is 1 to ``MAX_LIST``."""
        _check_scope(scope)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput(f"Invalid limit: {limit!r}. Use 1 to {MAX_LIST}.", field="limit")
        if query is not None and not isinstance(query, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput("A search is text.", field="query")
        if query is not None and len(query) > MAX_QUERY_CHARS:
            raise InvalidInput(
                f"A search holds at most {MAX_QUERY_CHARS} characters.", field="query"
            )
        needle = " ".join(query.split()).lower() if query else ""
        return await self._newest(scope, limit, needle or None)

    async def find(self, scope: Scope, id_or_prefix: str) -> MemoryFact | None:
        """The scope's user's fact with this id, or the one whose id starts with this prefix
        (at least ``MIN_ID_PREFIX`` characters); ``InvalidInput`` when several match."""
        _check_scope(scope)
        key = _check_id(id_or_prefix)
        async with self._db.read() as conn:
            repo = MemoryRepository(conn)
            row = await repo.by_id(scope, key)
            if row is None and len(key) >= MIN_ID_PREFIX:
                rows = await repo.with_id_prefix(scope, key, limit=2)
                if len(rows) > 1:
                    raise InvalidInput(
                        f"Several memories have ids starting with {key!r}: give more of the id.",
                        field="id",
                    )
                row = rows[0] if rows else None
        return None if row is None else _fact(row)

    async def forget(self, scope: Scope, fact_id: str) -> bool:
        """Delete the scope's user's fact with this exact id; whether there was one."""
        _check_scope(scope)
        key = _check_id(fact_id)
        async with self._db.transaction() as conn:
            return await MemoryRepository(conn).delete(scope, key)

    async def _newest(self, scope: Scope, limit: int, needle: str | None) -> list[MemoryFact]:
        async with self._db.read() as conn:
            rows = await MemoryRepository(conn).newest(scope, limit=limit, containing=needle)
        return [_fact(row) for row in rows]


def check_text(text: object) -> str:
    """``text`` as it would be stored, or ``InvalidInput`` saying why it cannot be."""
    if not isinstance(text, str):
        raise InvalidInput(f"A memory is text, not {type(text).__name__}.", field="text")
    clean = str.__str__(text).replace("\r\n", "\n").strip()
    if not clean:
        raise InvalidInput("A memory cannot be empty.", field="text")
    if len(clean) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"A memory holds at most {MAX_TEXT_CHARS} characters; this one has {len(clean)}.",
            field="text",
        )
    for char in clean:
        category = unicodedata.category(char)
        if (category == "Cc" and char not in _ALLOWED_CONTROLS) or category == "Cs":
            raise InvalidInput(
                f"A memory cannot hold control characters ({char!r}); newlines and tabs are fine.",
                field="text",
            )
    return clean


def _stored_level(text: str, sensitivity: object) -> Sensitivity:
    if not isinstance(sensitivity, str) or sensitivity not in LEVELS:
        raise InvalidInput(
            f"Invalid sensitivity: {sensitivity!r}. Use low, high or credential.",
            field="sensitivity",
        )
    found = classify_text(text)
    given = sensitivity
    level = found.level if LEVELS.index(found.level) > LEVELS.index(given) else given
    if level == "credential":
        why = "; ".join(found.reasons) if found.level == "credential" else "marked credential"
        raise PermissionDenied(f"A credential is never stored as a memory ({why}).")
    return level


def _check_scope(scope: object) -> None:
    if not isinstance(scope, Scope):
        raise InvalidInput("A memory belongs to a scope (org, project, user).", field="scope")


def _check_source(source: object, request_id: object) -> None:
    if not isinstance(source, str) or _SOURCE.fullmatch(source) is None:
        raise InvalidInput(
            f"Invalid source: {str(source)[:80]!r}. Use 1-64 letters, digits, '_', '.', ':' "
            "or '-'.",
            field="source",
        )
    if request_id is not None and (
        not isinstance(request_id, str) or _REQUEST_ID.fullmatch(request_id) is None
    ):
        raise InvalidInput(
            "Invalid request_id: use 1-64 printable ASCII characters.", field="request_id"
        )


def _check_id(fact_id: object) -> str:
    if not isinstance(fact_id, str) or not 1 <= len(fact_id.strip()) <= 36:
        raise InvalidInput("A memory id is 1-36 characters (a UUID or its start).", field="id")
    return fact_id.strip().lower()


async def _known(repo: MemoryRepository, scope: Scope, row: Row, level: Sensitivity) -> MemoryFact:
    """A stored fact met again, its sensitivity raised to ``level`` when that is higher."""
    fact = _fact(row)
    if LEVELS.index(level) > LEVELS.index(fact.sensitivity):
        await repo.raise_sensitivity(scope, fact.id, level)
        fact = MemoryFact(fact.id, fact.text, level, fact.source, fact.request_id, fact.created_at)
    return fact


def _fact(row: Row | dict[str, Any]) -> MemoryFact:
    level = row["sensitivity"]
    return MemoryFact(
        id=row["id"],
        text=row["text"],
        sensitivity=level if level in LEVELS else "high",  # an unknown stored level: careful
        source=row["source"],
        request_id=row["request_id"],
        created_at=row["created_at"],
    )
