"""People's sign-in sessions on the dashboard: an opaque token in an HttpOnly cookie.

    store = SessionStore(db)
    token = await store.create(principal)        # after an admin key signed in
    viewer = await store.find(token)             # on every page: None once expired/revoked
    viewer.csrf                                  # the token forms must carry

Only the token's SHA-256 is stored, so a copy of the database signs nobody in. A session
made with an API key ends when that key is revoked (checked on every request); a session
of ``pml dashboard`` (no key) ends with its lifetime. The CSRF token is derived from the
session token with HMAC, so it needs no storage and is worthless without the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from pml.registry.scope import Principal, Scope, check_role
from pml.storage.dashboard_session_repo import purge_expired_dashboard_sessions
from pml.storage.database import Database
from pml.storage.tables import api_keys, dashboard_sessions
from pml.storage.types import utc_now

SESSION_COOKIE = "pml_session"
SESSION_TTL = timedelta(hours=12)
TOKEN_BYTES = 32
MAX_TOKEN_LENGTH = 128


def token_hash(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def csrf_token(session_token: str) -> str:
    """The CSRF token of a session (the same for the session's whole life)."""
    return hmac.new(session_token.encode("utf-8"), b"pml-dashboard-csrf", "sha256").hexdigest()


@dataclass(frozen=True, slots=True)
class Viewer:
    """A signed-in person: who (an admin principal), and the CSRF token of their forms."""

    principal: Principal
    token: str
    expires_at: datetime

    @property
    def scope(self) -> Scope:
        return self.principal.scope

    @property
    def csrf(self) -> str:
        return csrf_token(self.token)

    @property
    def decided_by(self) -> str:
        """How decisions made on the dashboard are recorded (``user:<name>``)."""
        return f"user:{self.principal.scope.user}"


class SessionStore:
    """Creates, finds and ends dashboard sessions in ``dashboard_sessions``."""

    def __init__(self, db: Database, *, ttl: timedelta = SESSION_TTL) -> None:
        self._db = db
        self._ttl = ttl

    @property
    def ttl(self) -> timedelta:
        return self._ttl

    async def create(self, principal: Principal) -> str:
        """A new session for ``principal``; returns its token (shown only in the cookie)."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = utc_now()
        scope = principal.scope
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.insert(dashboard_sessions).values(
                    token_hash=token_hash(token),
                    key_id=principal.key_id,
                    org=scope.org,
                    project=scope.project,
                    user_id=scope.user,
                    role=principal.role,
                    created_at=now,
                    expires_at=now + self._ttl,
                )
            )
        return token

    async def find(self, token: object) -> Viewer | None:
        """The live session of ``token``, or None (unknown, expired, its key revoked)."""
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
            return None
        s, k = dashboard_sessions.c, api_keys.c
        query = (
            sa.select(s.key_id, s.org, s.project, s.user_id, s.role, s.expires_at, k.prefix)
            .select_from(dashboard_sessions.outerjoin(api_keys, k.id == s.key_id))
            .where(s.token_hash == token_hash(token))
            .where(s.expires_at > utc_now())
            .where(sa.or_(s.key_id.is_(None), k.revoked_at.is_(None)))
            .where(sa.or_(s.key_id.is_(None), k.id.is_not(None)))
        )
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        scope = Scope(row.org, row.project, row.user_id or "admin")
        principal = Principal(scope, check_role(row.role), row.key_id, row.prefix)
        return Viewer(principal, token, row.expires_at)

    async def end(self, token: str) -> None:
        """Sign out: the session is gone."""
        async with self._db.transaction() as conn:
            await conn.execute(
                sa.delete(dashboard_sessions).where(
                    dashboard_sessions.c.token_hash == token_hash(token)
                )
            )

    async def purge_expired(self) -> int:
        """Delete expired sessions; how many."""
        return await purge_expired_dashboard_sessions(self._db)


@dataclass(slots=True)
class SignInTokens:
    """``pml dashboard``'s one-time sign-in token (as Jupyter prints one): the first visit
    of the printed URL exchanges it for a session of ``principal``; it never works twice."""

    principal: Principal
    _token: str | None = None

    def issue(self) -> str:
        """A new one-time token (any earlier one stops working)."""
        self._token = secrets.token_urlsafe(TOKEN_BYTES)
        return self._token

    def redeem(self, token: object) -> Principal | None:
        """The principal when ``token`` is the live one-time token (then spent), else None."""
        live = self._token
        if live is None or not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
            return None
        if not hmac.compare_digest(live.encode(), token.encode("utf-8", "replace")):
            return None
        self._token = None
        return self.principal
