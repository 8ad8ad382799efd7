"""API keys on SQLite and PostgreSQL: a key fixes the scope and role, is stored hashed, and
dies revoked."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput, NotFound
from pml.gateway.keys import ApiKeyRecord, ApiKeys
from pml.registry.scope import Principal, Scope
from pml.storage.database import Database
from pml.storage.keys_repo import SqlApiKeyRepository
from pml.storage.tables import api_keys

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


async def stored_rows(db: Database) -> list[dict[str, object]]:
    async with db.read() as conn:
        return [dict(row._mapping) for row in await conn.execute(sa.select(api_keys))]


async def test_a_created_key_authenticates_as_its_org_project_and_user(db: Database) -> None:
    keys = ApiKeys(db)

    key, record = await keys.create("acme", "webapp", user="erwan")

    assert await keys.authenticate(key) == Scope("acme", "webapp", "erwan")
    assert key.startswith("pml_")
    assert len(key) == 47
    assert record.prefix == key[:12]
    assert (record.org, record.project, record.user) == ("acme", "webapp", "erwan")
    assert record.revoked_at is None


async def test_a_key_without_user_authenticates_as_key_prefix(db: Database) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp")

    scope = await keys.authenticate(key)

    assert scope == Scope("acme", "webapp", f"key:{record.prefix}")
    assert record.user is None


async def test_only_the_sha256_of_the_key_is_stored(db: Database) -> None:
    key, record = await ApiKeys(db).create("acme", "webapp", user="erwan")

    rows = await stored_rows(db)

    assert len(rows) == 1
    row = rows[0]
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert row["prefix"] == record.prefix == key[:12]
    assert all(key not in str(value) for value in row.values())
    assert key[12:20] not in str(row)  # not even the secret part beyond the display prefix


async def test_two_keys_are_different_and_have_their_own_hashes(db: Database) -> None:
    keys = ApiKeys(db)
    first, _ = await keys.create("acme", "webapp")
    second, _ = await keys.create("acme", "webapp")

    assert first != second
    assert len({row["key_hash"] for row in await stored_rows(db)}) == 2


async def test_keys_of_two_orgs_never_see_each_others_scope(db: Database) -> None:
    keys = ApiKeys(db)
    acme_key, acme = await keys.create("acme", "webapp", user="erwan")
    globex_key, globex = await keys.create("globex", "webapp", user="hank")

    assert await keys.authenticate(acme_key) == Scope("acme", "webapp", "erwan")
    assert await keys.authenticate(globex_key) == Scope("globex", "webapp", "hank")
    assert [r.id for r in await keys.list(org="acme")] == [acme.id]
    assert [r.id for r in await keys.list(org="globex")] == [globex.id]
    assert [r.id for r in await keys.list(org="acme", project="other")] == []


async def test_a_revoked_key_no_longer_authenticates_and_others_still_do(db: Database) -> None:
    clock = Clock()
    keys = ApiKeys(db, clock=clock)
    revoked_key, record = await keys.create("acme", "webapp", user="erwan")
    kept_key, _ = await keys.create("acme", "webapp", user="lea")
    assert await keys.authenticate(revoked_key) is not None

    clock.now = T0 + timedelta(hours=1)
    revoked = await keys.revoke(record.prefix)

    assert await keys.authenticate(revoked_key) is None
    assert await keys.authenticate(kept_key) == Scope("acme", "webapp", "lea")
    assert revoked.id == record.id
    assert revoked.revoked_at == T0 + timedelta(hours=1)
    assert not revoked.active


async def test_revoking_twice_is_fine_and_keeps_the_first_revocation_time(db: Database) -> None:
    clock = Clock()
    keys = ApiKeys(db, clock=clock)
    _, record = await keys.create("acme", "webapp")
    first = await keys.revoke(record.id)

    clock.now = T0 + timedelta(days=1)
    second = await keys.revoke(record.id)

    assert first.revoked_at == second.revoked_at == T0
    assert [r.active for r in await keys.list()] == [False]


async def test_revoke_accepts_the_full_key(db: Database) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp")

    assert (await keys.revoke(key)).id == record.id
    assert await keys.authenticate(key) is None


async def test_revoking_an_unknown_key_is_not_found(db: Database) -> None:
    keys = ApiKeys(db)
    await keys.create("acme", "webapp")

    with pytest.raises(NotFound, match="API key not found: pml_nope"):
        await keys.revoke("pml_nope")
    with pytest.raises(InvalidInput):
        await keys.revoke("  ")
    assert [r.active for r in await keys.list()] == [True]


async def test_an_ambiguous_prefix_is_refused_and_revokes_nothing(db: Database) -> None:
    keys = ApiKeys(db)
    _, record = await keys.create("acme", "webapp")
    # A twin prefix: 48 random bits make it rare, not impossible.
    async with db.transaction() as conn:
        await SqlApiKeyRepository(conn).insert(
            id="twin",
            key_hash="0" * 64,
            prefix=record.prefix,
            org="acme",
            project="webapp",
            user_id=None,
            created_at=T0,
        )

    with pytest.raises(InvalidInput, match="matches 2 keys"):
        await keys.revoke(record.prefix)
    assert all(r.active for r in await keys.list())
    assert (await keys.revoke("twin")).id == "twin"


@pytest.mark.parametrize(
    ("org", "project", "user"),
    [
        ("", "webapp", None),
        ("acme corp", "webapp", None),
        ("acme", "web.app", None),
        ("acme", "x" * 65, None),
        ("acme", "webapp", ""),
        ("acme", "webapp", "u" * 129),
    ],
)
async def test_an_invalid_org_project_or_user_is_invalid_input_and_stores_nothing(
    db: Database, org: str, project: str, user: str | None
) -> None:
    with pytest.raises(InvalidInput):
        await ApiKeys(db).create(org, project, user=user)

    assert await stored_rows(db) == []


async def test_hostile_tokens_never_authenticate(db: Database) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp", user="erwan")
    stored_hash = hashlib.sha256(key.encode()).hexdigest()
    hostile: list[object] = [
        None,
        123,
        key.encode(),
        [key],
        {"key": key},
        "",
        " ",
        "x" * 10_000,
        "pml_" + "a" * 10_000,
        key * 2,
        key[:-1],
        key + " ",
        " " + key,
        key + "\n",
        key + "\x00",
        key.upper(),
        f"Bearer {key}",
        record.prefix,
        record.id,
        stored_hash,
        "pml_" + stored_hash,
        "' OR 1=1 --",
        "pml_' OR '1'='1' --",
        "pml_%",
        "pml_" + "_" * 43,
        "pml_" + "%" * 43,
    ]

    results = [await keys.authenticate(token) for token in hostile]
    principals = [await keys.principal(token) for token in hostile]

    assert results == [None] * len(hostile)
    assert principals == [None] * len(hostile)
    assert await keys.authenticate(key) == Scope("acme", "webapp", "erwan")


async def test_last_used_is_written_at_most_once_a_minute(db: Database) -> None:
    clock = Clock()
    keys = ApiKeys(db, clock=clock)
    key, _ = await keys.create("acme", "webapp")

    async def last_used() -> datetime | None:
        return (await keys.list())[0].last_used_at

    assert await last_used() is None
    await keys.authenticate(key)
    assert await last_used() == T0

    clock.now = T0 + timedelta(seconds=59)
    await keys.authenticate(key)
    assert await last_used() == T0

    # Another replica (its own ApiKeys) sees the recent write in the database and skips too.
    other = ApiKeys(db, clock=clock)
    await other.authenticate(key)
    assert await last_used() == T0

    clock.now = T0 + timedelta(seconds=61)
    await keys.authenticate(key)
    assert await last_used() == T0 + timedelta(seconds=61)


async def test_listing_never_carries_the_key_or_its_hash(db: Database) -> None:
    keys = ApiKeys(db, clock=Clock())
    key, record = await keys.create("acme", "webapp", user="erwan")
    key_hash = hashlib.sha256(key.encode()).hexdigest()

    listed = await keys.list()

    assert listed == [record]
    as_dict = listed[0].to_dict()
    assert as_dict == {
        "id": record.id,
        "prefix": key[:12],
        "org": "acme",
        "project": "webapp",
        "user": "erwan",
        "role": "agent",
        "created_at": T0.isoformat(),
        "revoked_at": None,
        "last_used_at": None,
        "active": True,
    }
    assert key not in str(as_dict)
    assert key_hash not in str(as_dict)
    assert "key_hash" not in ApiKeyRecord.__slots__  # type: ignore[attr-defined]


async def test_list_filters_are_validated(db: Database) -> None:
    with pytest.raises(InvalidInput, match="Invalid org"):
        await ApiKeys(db).list(org="' OR 1=1 --")


async def test_a_key_is_an_agent_unless_created_admin(db: Database) -> None:
    keys = ApiKeys(db)
    agent_key, agent = await keys.create("acme", "webapp", user="erwan")
    admin_key, admin = await keys.create("acme", "webapp", user="ana", role="admin")

    assert (agent.role, admin.role) == ("agent", "admin")
    assert [(r.id, r.role) for r in await keys.list()] == [(agent.id, "agent"), (admin.id, "admin")]
    assert [row["role"] for row in await stored_rows(db)] == ["agent", "admin"]
    assert [r.to_dict()["role"] for r in await keys.list()] == ["agent", "admin"]
    assert await keys.authenticate(admin_key) == Scope("acme", "webapp", "ana")
    assert await keys.authenticate(agent_key) == Scope("acme", "webapp", "erwan")


async def test_principal_gives_the_scope_role_and_which_key(db: Database) -> None:
    keys = ApiKeys(db)
    admin_key, admin = await keys.create("acme", "webapp", user="ana", role="admin")
    agent_key, agent = await keys.create("acme", "webapp")

    found_admin = await keys.principal(admin_key)
    found_agent = await keys.principal(agent_key)

    assert found_admin == Principal(
        Scope("acme", "webapp", "ana"), "admin", key_id=admin.id, key_prefix=admin_key[:12]
    )
    assert found_admin is not None
    assert found_admin.is_admin
    assert found_agent == Principal(
        Scope("acme", "webapp", f"key:{agent.prefix}"),
        "agent",
        key_id=agent.id,
        key_prefix=agent.prefix,
    )
    assert found_agent is not None
    assert not found_agent.is_admin


async def test_a_revoked_admin_key_is_no_principal(db: Database) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp", user="ana", role="admin")
    await keys.revoke(record.id)

    assert await keys.principal(key) is None


@pytest.mark.parametrize(
    "role",
    [
        None,
        1,
        True,
        ["admin"],
        {"role": "admin"},
        b"admin",
        "",
        " ",
        "ADMIN",
        "Admin",
        " admin",
        "admin ",
        "admin\n",
        "admin\x00",
        "admin; DROP TABLE api_keys; --",
        "' OR '1'='1",
        "\u0430dmin",  # Cyrillic a
        "ａｄｍｉｎ",  # fullwidth
        "admin\u200b",  # zero-width space
        "root",
        "a" * 100_000,
    ],
    ids=lambda role: repr(role)[:30],
)
async def test_a_hostile_role_is_invalid_input_and_stores_nothing(
    db: Database, role: object
) -> None:
    with pytest.raises(InvalidInput, match="Invalid role") as raised:
        await ApiKeys(db).create("acme", "webapp", user="erwan", role=role)  # type: ignore[arg-type]

    assert raised.value.data.get("field") == "role"
    assert len(raised.value.message) < 200
    assert await stored_rows(db) == []  # the table is there, and empty


@pytest.mark.parametrize("stored", ["root", "ADMIN", "", "superadmin"])
async def test_a_stored_role_that_is_not_known_authenticates_as_nothing(
    db: Database, stored: str
) -> None:
    keys = ApiKeys(db)
    key, record = await keys.create("acme", "webapp", user="erwan", role="admin")
    async with db.transaction() as conn:
        await conn.execute(api_keys.update().where(api_keys.c.id == record.id).values(role=stored))

    assert await keys.principal(key) is None
    assert await keys.authenticate(key) is None
    assert [(r.id, r.role, r.active) for r in await keys.list()] == [(record.id, stored, True)]
