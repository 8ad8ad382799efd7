"""Dashboard sessions on both backends: only a digest stored, ended by expiry, sign-out and
key revocation; the one-time sign-in token of ``pml dashboard`` works once."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from pml.gateway.keys import ApiKeys
from pml.registry.scope import Principal, Scope
from pml.storage.database import Database
from pml.storage.tables import dashboard_sessions
from pml.web.dashboard.sessions import SessionStore, SignInTokens, csrf_token

pytestmark = pytest.mark.anyio

ANA = Principal(Scope("acme", "webapp", "ana"), "admin")


async def test_a_session_is_found_by_its_token_and_only_its_digest_is_stored(db: Database) -> None:
    store = SessionStore(db)
    token = await store.create(ANA)
    viewer = await store.find(token)
    assert viewer is not None
    assert viewer.principal.scope == ANA.scope
    assert viewer.principal.is_admin
    assert viewer.csrf == csrf_token(token) != csrf_token(token + "x")
    async with db.read() as conn:
        stored = [row.token_hash for row in await conn.execute(sa.select(dashboard_sessions))]
    assert token not in stored
    assert len(stored) == 1
    for wrong in ("", token + "x", token[:-1], None, 42, "x" * 10_000, "\x00"):
        assert await store.find(wrong) is None


async def test_expired_and_ended_sessions_are_refused_and_purged(db: Database) -> None:
    expired = SessionStore(db, ttl=timedelta(seconds=-1))
    old = await expired.create(ANA)
    assert await expired.find(old) is None
    store = SessionStore(db)
    live = await store.create(ANA)
    assert await store.purge_expired() == 1
    assert await store.find(live) is not None
    await store.end(live)
    assert await store.find(live) is None


async def test_a_session_ends_when_its_api_key_is_revoked(db: Database) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp", "ana", role="admin")
    principal = await keys.principal(key)
    assert principal is not None
    store = SessionStore(db)
    token = await store.create(principal)
    assert await store.find(token) is not None
    await keys.revoke(record.id)
    assert await store.find(token) is None


def test_the_one_time_sign_in_token_works_once_and_only_the_newest() -> None:
    tokens = SignInTokens(ANA)
    assert tokens.redeem("anything") is None
    first = tokens.issue()
    second = tokens.issue()
    assert tokens.redeem(first) is None
    assert tokens.redeem(second) == ANA
    assert tokens.redeem(second) is None
    third = tokens.issue()
    for wrong in (None, 1, "", third + "x", "é" * 10, "x" * 1000):
        assert tokens.redeem(wrong) is None
    assert tokens.redeem(third) == ANA
