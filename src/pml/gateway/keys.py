"""API keys for the HTTP gateway: each key fixes the org, project, user and role of a request.

A key is ``pml_`` followed by 43 URL-safe random characters. Only its SHA-256 hex digest is
stored, with the first 12 characters (``prefix``) kept to tell keys apart in listings; the
key itself is returned once, by :meth:`ApiKeys.create`::

    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp", user="erwan", role="admin")
    scope = await keys.authenticate(key)      # Scope("acme", "webapp", "erwan")
    who = await keys.principal(key)           # Principal(scope, "admin", record.id, prefix)
    await keys.revoke(record.prefix)
    await keys.authenticate(key)              # None

A key's role is ``agent`` (the default: the MCP surface, its own user's audit events) or
``admin`` (also approvals, every user's audit events of its org/project, the dashboard). A
stored role that is neither authenticates as nothing: unknown rights are no rights.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pml.errors import InvalidInput, NotFound, StorageError
from pml.registry.scope import SCOPE_PART, Principal, Role, Scope, check_role
from pml.storage.database import Database
from pml.storage.keys_repo import Row, SqlApiKeyRepository, find_live_by_hash
from pml.storage.types import utc_now

logger = logging.getLogger(__name__)

KEY_PREFIX = "pml_"
PREFIX_LENGTH = 12
# A generated key is exactly pml_ + 43 characters; the range tolerates other lengths of
# token_urlsafe while rejecting junk before any hashing or database round trip.
KEY_SHAPE = re.compile(r"pml_[A-Za-z0-9_-]{16,128}")
# last_used_at is a hint for people, not an audit trail: one write per key per minute.
TOUCH_INTERVAL = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What is known about a key, without the key or its hash."""

    id: str
    prefix: str
    org: str
    project: str
    user: str | None
    # As stored: only "agent" and "admin" authenticate (a listing still shows any other).
    role: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def active(self) -> bool:
        """Whether the key still authenticates."""
        return self.revoked_at is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (times as ISO 8601) plus ``active``."""
        return {
            "id": self.id,
            "prefix": self.prefix,
            "org": self.org,
            "project": self.project,
            "user": self.user,
            "role": self.role,
            "created_at": self.created_at.isoformat(),
            "revoked_at": _iso(self.revoked_at),
            "last_used_at": _iso(self.last_used_at),
            "active": self.active,
        }


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256 hex digest."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _record(row: Row) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row["id"],
        prefix=row["prefix"],
        org=row["org"],
        project=row["project"],
        user=row["user_id"],
        role=str(row["role"]),
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )


def _check_filter(field: str, value: str | None) -> str | None:
    if value is not None and (not isinstance(value, str) or not SCOPE_PART.fullmatch(value)):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput(
            f"Invalid {field}: {value!r}. Use 1-64 letters, digits, '_' or '-'.", field=field
        )
    return value


def _check_role(value: object) -> Role:
    # check_role names the refused value; a long one is cut so the error stays one short line.
    if isinstance(value, str) and len(value) > 40:
        value = value[:40] + "..."
    return check_role(value)


def _known_role(value: str) -> Role | None:
    try:
        return check_role(value)
    except InvalidInput:
        return None


class ApiKeys:
    """Create, authenticate, list and revoke API keys stored in the database."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._clock = clock
        # When this process last wrote last_used_at per key id: skips even the conditional
        # UPDATE for a busy key. The database condition covers other replicas.
        self._touched: dict[str, datetime] = {}

    async def create(
        self, org: str, project: str, user: str | None = None, role: str = "agent"
    ) -> tuple[str, ApiKeyRecord]:
        """A new key for ``org``/``project`` (``user``, ``role``): shown here once, never stored."""
        checked_role = _check_role(role)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        prefix = key[:PREFIX_LENGTH]
        # Scope validates org, project and user exactly as every request will see them.
        Scope(org, project, user if user is not None else f"key:{prefix}")
        record = ApiKeyRecord(
            id=str(uuid.uuid4()),
            prefix=prefix,
            org=org,
            project=project,
            user=user,
            role=checked_role,
            created_at=self._clock(),
            revoked_at=None,
            last_used_at=None,
        )
        async with self._db.transaction() as conn:
            await SqlApiKeyRepository(conn).insert(
                id=record.id,
                key_hash=hash_key(key),
                prefix=prefix,
                org=org,
                project=project,
                user_id=user,
                created_at=record.created_at,
                role=checked_role,
            )
        return key, record

    async def authenticate(self, token: object) -> Scope | None:
        """The scope a live key grants, or None for anything else (never raises on input)."""
        principal = await self.principal(token)
        return principal.scope if principal is not None else None

    async def principal(self, token: object) -> Principal | None:
        """Who a live key is (scope, role, key id and prefix), or None for anything else."""
        if not isinstance(token, str) or not KEY_SHAPE.fullmatch(token):
            return None
        digest = hash_key(token)
        row = await find_live_by_hash(self._db, digest)
        if row is None or not hmac.compare_digest(str(row["key_hash"]), digest):
            return None
        record = _record(row)
        role = _known_role(record.role)
        if role is None:
            logger.warning("API key %s has an unknown role; refused", record.prefix)
            return None
        await self._touch(record)
        scope = Scope(record.org, record.project, record.user or f"key:{record.prefix}")
        return Principal(scope, role, key_id=record.id, key_prefix=record.prefix)

    async def list(self, org: str | None = None, project: str | None = None) -> list[ApiKeyRecord]:
        """Every key, oldest first, optionally of one org and/or project."""
        _check_filter("org", org)
        _check_filter("project", project)
        async with self._db.read() as conn:
            rows = await SqlApiKeyRepository(conn).list(org=org, project=project)
        return [_record(row) for row in rows]

    async def revoke(self, key_id_or_prefix: str) -> ApiKeyRecord:
        """Revoke the key with this id, prefix (or full key); revoking twice is harmless."""
        if not isinstance(key_id_or_prefix, str) or not key_id_or_prefix.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput("Give the id or prefix of an API key.", field="key")
        wanted = key_id_or_prefix.strip()
        digest = hash_key(wanted) if KEY_SHAPE.fullmatch(wanted) else None
        async with self._db.transaction() as conn:
            repo = SqlApiKeyRepository(conn)
            found = await repo.find(wanted, digest)
            if not found:
                raise NotFound(f"API key not found: {wanted}")
            if len(found) > 1:
                raise InvalidInput(
                    f"API key prefix {wanted!r} matches {len(found)} keys; give the id instead.",
                    field="key",
                    ids=[row["id"] for row in found],
                )
            key_id = str(found[0]["id"])
            await repo.revoke(key_id, self._clock())
            row = await repo.get(key_id)
        assert row is not None
        self._touched.pop(key_id, None)
        return _record(row)

    async def _touch(self, record: ApiKeyRecord) -> None:
        now = self._clock()
        stale_before = now - TOUCH_INTERVAL
        seen = [t for t in (self._touched.get(record.id), record.last_used_at) if t is not None]
        if seen and max(seen) > stale_before:
            return
        self._touched[record.id] = now
        try:
            async with self._db.transaction() as conn:
                await SqlApiKeyRepository(conn).touch(record.id, now, stale_before)
        except StorageError:
            # A busy database must not turn a valid key into a refused request.
            logger.warning("could not record the use of API key %s", record.prefix, exc_info=True)
