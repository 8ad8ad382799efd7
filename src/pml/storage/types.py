"""Column types that behave the same on SQLite and PostgreSQL.

SQLite has no time zones and no JSONB; these decorators make both backends store and
return the same Python values::

    created_at = sa.Column("created_at", UtcDateTime(), nullable=False)
    tags = sa.Column("tags", JsonValue(), nullable=False)

JSON read back goes through ``stored_json`` (the engines' deserialiser): a stored value
nested too deep for a parser is a ``StorageError``, never a ``RecursionError``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect

from pml import wire_json
from pml.errors import StorageError

# Stored records wrap values that were checked at ``MAX_JSON_DEPTH`` when they came in (a
# journal holds results, a trace its arguments): reading allows room for that wrapping.
MAX_STORED_DEPTH: Final = 2 * wire_json.MAX_JSON_DEPTH


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on both backends (naive UTC stored on SQLite)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.DateTime(timezone=False))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass a UTC-aware datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def JsonValue() -> sa.types.TypeEngine[Any]:
    """JSON on SQLite, JSONB on PostgreSQL."""
    return sa.JSON().with_variant(JSONB(), "postgresql")


def utc_now() -> datetime:
    """The current time, UTC-aware, truncated to microseconds as both backends store it."""
    return datetime.now(UTC)


def stored_json(text: str | bytes) -> Any:
    """A stored JSON document as Python values (the engines' ``json_deserializer``);
    ``StorageError`` when it is nested more than ``MAX_STORED_DEPTH`` levels."""
    try:
        return wire_json.loads(text, limit=MAX_STORED_DEPTH)
    except wire_json.TooDeep:
        raise StorageError(
            f"A stored value is nested more than {MAX_STORED_DEPTH} levels deep and cannot be "
            "read (it was not written by this version of PML)"
        ) from None
