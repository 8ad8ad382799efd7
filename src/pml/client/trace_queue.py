"""Traces at rest: a durable FIFO in SQLite (their wire shape: ``pml.client.outgoing``).

    with TraceQueue(Path("~/.local/share/pml/traces.db").expanduser()) as queue:
        queue.put(prepare_trace({"workflowId": "wf-1", "success": True, "durationMs": 3}))
        batch = queue.peek(100)                   # oldest first, parents before children
        ...                                       # the server answered for them
        queue.remove([item.id for item in batch])

``put`` returns once the trace is committed: WAL mode with ``synchronous=NORMAL`` keeps
every commit through a crash of the process (a power cut may lose the last ones). The file
is ``0o600`` (SQLite gives its ``-wal`` and ``-shm`` files the same mode); several processes
may open it at once (``busy_timeout``). The methods are synchronous and short, and locked:
a caller may run them in a worker thread. Bounded: a trace that JSON cannot hold or whose
JSON is over ``MAX_TRACE_BYTES`` is refused (``InvalidInput``); past ``max_items`` the
oldest traces are dropped, with a warning.

Order: ``peek`` returns the oldest traces first, except that a trace whose ``parentId`` is
the ``traceId`` of another queued trace comes after that parent, in the same batch (a batch
too small for a whole line of ancestors holds its oldest part). Ids that loop
(``a → b → a``) would hold each other back for ever: in a loop the oldest trace is taken
as having no parent.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self, cast

from pml.client.outgoing import prepare_trace as prepare_trace
from pml.errors import InvalidInput, StorageError

logger = logging.getLogger(__name__)

MAX_TRACE_BYTES: Final = 256 * 1024
MAX_ITEMS: Final = 100_000
BUSY_TIMEOUT_MS: Final = 10_000
_CHUNK: Final = 500  # ids per statement, well under SQLite's bound-parameter limit

_SCHEMA: Final = (
    # AUTOINCREMENT: an id is never reused, so removing a peeked id can only remove that row
    """CREATE TABLE IF NOT EXISTS traces (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        trace_id TEXT,
        parent_id TEXT,
        body TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS traces_by_trace_id ON traces (trace_id, id)",
    # the size kept by triggers: the cap is checked on every put, COUNT(*) scans the table
    "CREATE TABLE IF NOT EXISTS queue_size (one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER)",
    "INSERT OR IGNORE INTO queue_size (one, n) SELECT 1, COUNT(*) FROM traces",
    """CREATE TRIGGER IF NOT EXISTS traces_added AFTER INSERT ON traces
       BEGIN UPDATE queue_size SET n = n + 1; END""",
    """CREATE TRIGGER IF NOT EXISTS traces_removed AFTER DELETE ON traces
       BEGIN UPDATE queue_size SET n = n - 1; END""",
)

_Row = tuple[int, str | None, str | None]  # id, traceId, parentId


@dataclass(frozen=True, slots=True)
class QueuedTrace:
    """A trace waiting to be sent, with the id ``remove`` takes."""

    id: int
    trace: dict[str, Any]


class TraceQueue:
    """A durable FIFO of JSON traces in one SQLite file."""

    def __init__(self, path: Path, *, max_items: int = MAX_ITEMS) -> None:
        self.path = path
        self.max_items = max(1, max_items)
        self.dropped = 0  # traces lost to the cap since this queue was opened
        self._lock = threading.Lock()
        self._warned_full = False
        try:
            _create_private_file(path)
            self._conn: sqlite3.Connection | None = _connect(path)
        except (OSError, sqlite3.Error) as error:
            raise StorageError(f"Cannot open the trace queue {path}: {error}") from error

    def put(self, trace: Mapping[str, Any]) -> int:
        """Store one trace (durable on return); its queue id. ``InvalidInput`` if unfit."""
        body = _encode(trace)
        trace_id, parent_id = (trace.get(key) for key in ("traceId", "parentId"))
        trace_id = trace_id if isinstance(trace_id, str) else None
        parent_id = parent_id if isinstance(parent_id, str) else None
        with self._locked("write") as conn, _transaction(conn, "IMMEDIATE"):
            cursor = conn.execute(
                "INSERT INTO traces (trace_id, parent_id, body) VALUES (?, ?, ?)",
                (trace_id, parent_id, body),
            )
            row_id = cast(int, cursor.lastrowid)
            excess = _size(conn) - self.max_items
            if excess > 0:
                conn.execute(
                    "DELETE FROM traces WHERE id IN (SELECT id FROM traces ORDER BY id LIMIT ?)",
                    (excess,),
                )
        self._note_overflow(max(0, excess))
        return row_id

    def peek(self, limit: int = 100) -> list[QueuedTrace]:
        """Up to ``limit`` traces, oldest first and parents before children; not removed."""
        if limit <= 0:
            return []
        with self._locked("read") as conn:
            with _transaction(conn):  # one snapshot for the order and the bodies
                order = _ordered_ids(conn, limit)
                bodies = _bodies(conn, order)
            decoded = [(row_id, _decode(bodies.get(row_id))) for row_id in order]
            batch = [QueuedTrace(row_id, trace) for row_id, trace in decoded if trace is not None]
            unreadable = [row_id for row_id, trace in decoded if trace is None]
            if unreadable:  # not written by ``put``: it would block the queue for ever
                logger.error("trace queue: dropped %d unreadable entries", len(unreadable))
                with _transaction(conn, "IMMEDIATE"):
                    _delete(conn, unreadable)
        return batch

    def remove(self, ids: Sequence[int]) -> None:
        """Delete these entries (ids no longer queued are ignored)."""
        if not ids:
            return
        with self._locked("write") as conn, _transaction(conn, "IMMEDIATE"):
            _delete(conn, [int(row_id) for row_id in ids])

    def count(self) -> int:
        """How many traces are queued."""
        with self._locked("read") as conn:
            return _size(conn)

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def _locked(self, action: str) -> Generator[sqlite3.Connection]:
        """The connection, under the lock; SQLite errors become ``StorageError``."""
        with self._lock:
            if self._conn is None:
                raise StorageError(f"The trace queue {self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as error:
                raise StorageError(f"Trace queue {action} failed ({self.path}): {error}") from error

    def _note_overflow(self, dropped: int) -> None:
        # one warning per overflow episode: a long outage must not log once per trace
        if not dropped:
            self._warned_full = False
            return
        self.dropped += dropped
        if not self._warned_full:
            self._warned_full = True
            logger.warning(
                "trace queue full (%d traces): dropping the oldest ones until it drains",
                self.max_items,
            )


def _create_private_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(descriptor)
    os.chmod(path, 0o600)  # also tightens a file left readable by something else


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,  # transactions are explicit (``_transaction``)
        check_same_thread=False,  # callers may use worker threads; ``_lock`` serialises
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning("trace queue %s: WAL mode unavailable (journal %s)", path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        with _transaction(conn, "IMMEDIATE"):
            for statement in _SCHEMA:
                conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _transaction(conn: sqlite3.Connection, mode: str = "") -> Generator[None]:
    conn.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # SQLite may already have rolled back (disk full, I/O error)
            logger.debug("trace queue: rollback failed", exc_info=True)
        raise
    conn.execute("COMMIT")


def _encode(trace: Mapping[str, Any]) -> str:
    """The trace as compact JSON text; ``InvalidInput`` if it cannot be, or is too large."""
    if not isinstance(cast(object, trace), Mapping):  # callers may be untyped
        raise InvalidInput(f"A trace must be a JSON object, not {type(trace).__name__}")
    try:
        text = json.dumps(dict(trace), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))  # lone surrogates fail here, as in SQLite
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidInput(f"The trace cannot be stored as JSON: {error}"[:300]) from None
    if size > MAX_TRACE_BYTES:
        raise InvalidInput(
            f"The trace is too large: {size} bytes of JSON (at most {MAX_TRACE_BYTES})",
            size=size,
        )
    return text


def _decode(body: str | None) -> dict[str, Any] | None:
    if body is None:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _size(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT n FROM queue_size").fetchone()
    return int(row[0]) if row is not None else 0


def _delete(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        conn.execute(f"DELETE FROM traces WHERE id IN ({marks})", chunk)


def _bodies(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        for row_id, body in conn.execute(
            f"SELECT id, body FROM traces WHERE id IN ({marks})", chunk
        ):
            found[int(row_id)] = str(body)
    return found


def _ordered_ids(conn: sqlite3.Connection, limit: int) -> list[int]:
    """Up to ``limit`` ids: each oldest trace preceded by its queued ancestors, eldest first."""
    chosen: list[int] = []
    placed: set[int] = set()
    for row in conn.execute("SELECT id, trace_id, parent_id FROM traces ORDER BY id"):
        if len(chosen) >= limit:
            break
        if row[0] in placed:
            continue
        for row_id in _lineage(conn, cast(_Row, row), placed):
            if len(chosen) >= limit:
                break
            chosen.append(row_id)
            placed.add(row_id)
    return chosen


def _lineage(conn: sqlite3.Connection, row: _Row, placed: set[int]) -> list[int]:
    """``row`` and its queued ancestors not yet placed, eldest first.

    The walk up stops at an ancestor already placed or no longer queued; in a loop of ids
    the oldest trace of the loop is the eldest (its own parent is ignored)."""
    walk = [row]
    seen = {row[0]: 0}
    node = row
    while node[2] is not None:
        parent = _oldest_with_trace_id(conn, node[2])
        if parent is None or parent[0] in placed:
            break
        if parent[0] in seen:
            loop = walk[seen[parent[0]] :]
            eldest = min(loop, key=lambda item: item[0])
            walk = walk[: walk.index(eldest) + 1]
            break
        seen[parent[0]] = len(walk)
        walk.append(parent)
        node = parent
    return [item[0] for item in reversed(walk)]


def _oldest_with_trace_id(conn: sqlite3.Connection, trace_id: str) -> _Row | None:
    row = conn.execute(
        "SELECT id, trace_id, parent_id FROM traces WHERE trace_id = ? ORDER BY id LIMIT 1",
        (trace_id,),
    ).fetchone()
    return cast(_Row, row) if row is not None else None
