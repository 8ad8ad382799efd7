"""Grants on a real database (SQLite and PostgreSQL): issue, find-and-spend, races, revoke,
purge, tenant isolation, and the validation of everything a caller can send."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from pml.errors import InvalidInput, NotFound
from pml.policy.grants import GrantService
from pml.policy.permissions import CallFacts, Grant
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.grant_repo import SqlGrantRepository
from pml.storage.tables import permission_grants

pytestmark = pytest.mark.anyio

VERSION = "3f2a9c01ab12"
START = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)


@dataclass
class Event:
    event: str
    scope: Scope
    details: dict[str, Any]
    decided_by: str | None
    actor: str | None


@dataclass
class RecordingAuditor:
    """Keeps every event it is given (the ``Auditor`` protocol, without a log)."""

    events: list[Event] = field(default_factory=list[Event])

    def emit(
        self,
        event: str,
        *,
        scope: Scope,
        details: Mapping[str, Any],
        decided_by: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.events.append(Event(event, scope, dict(details), decided_by, actor))

    def names(self) -> list[str]:
        return [event.event for event in self.events]


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Kit:
    db: Database
    grants: GrantService
    audit: RecordingAuditor
    clock: Clock

    async def issue(self, scope: Scope, **options: Any) -> Grant:
        given: dict[str, Any] = {
            "capability": "file_write",
            "tool_pattern": "fs:write_*",
            "ttl_s": 900,
            "max_uses": None,
            "decided_by": "user:erwan",
        }
        return await self.grants.issue(scope, **(given | options))


@pytest.fixture
def kit(db: Database) -> Kit:
    audit, clock = RecordingAuditor(), Clock()
    return Kit(db, GrantService(db, audit, policy_version=VERSION, clock=clock), audit, clock)


def write(path: str = "/data/a.txt", **arguments: Any) -> CallFacts:
    return CallFacts.of("fs", "write_file", "file_write", {"path": path, **arguments})


async def count_rows(db: Database) -> int:
    async with db.read() as conn:
        return int(
            (
                await conn.execute(sa.select(sa.func.count()).select_from(permission_grants))
            ).scalar_one()
        )


async def test_an_issued_grant_is_stored_listed_and_audited(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(
        scope, path_prefix="/data/../data/", domain="Example.COM", purpose="édition ‮"
    )

    assert grant.principal == "erwan"
    assert (grant.org, grant.project) == ("acme", "webapp")
    assert grant.scope.path_prefix == "/data"
    assert grant.scope.domain == "example.com"
    assert grant.issued_at == START
    assert grant.expires_at == START + timedelta(seconds=900)
    assert grant.policy_version == VERSION
    assert (grant.uses, grant.revoked) == (0, False)
    assert await kit.grants.list(scope) == [grant]
    assert await kit.grants.get(scope, grant.id) == grant
    [event] = kit.audit.events
    assert event.event == "PERMISSION_GRANTED"
    assert event.decided_by == "user:erwan"
    assert event.scope == scope
    assert event.details["grant_id"] == grant.id
    assert event.details["scope"] == {
        "tool": "fs:write_*",
        "path_prefix": "/data",
        "domain": "example.com",
    }


async def test_a_once_grant_covers_one_call_then_no_more(kit: Kit, scope: Scope) -> None:
    call = write()
    grant = await kit.issue(scope, max_uses=1, args_digest=call.digest)

    used, refused = await kit.grants.find_and_consume(scope, call)
    again, _ = await kit.grants.find_and_consume(scope, call)

    assert used is not None
    assert (used.id, used.uses) == (grant.id, 1)
    assert refused == []
    assert again is None
    assert await kit.grants.list(scope) == []
    [stored] = await kit.grants.list(scope, include_inactive=True)
    assert stored.uses == 1


async def test_a_limited_grant_is_spent_use_by_use(kit: Kit, scope: Scope) -> None:
    await kit.issue(scope, max_uses=3)

    spent = [await kit.grants.find_and_consume(scope, write(f"/x/{i}")) for i in range(4)]

    assert [grant.uses if grant else None for grant, _ in spent] == [1, 2, 3, None]


async def test_an_unlimited_grant_covers_calls_until_it_expires(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(scope, ttl_s=60)

    for _ in range(5):
        found, _ = await kit.grants.find_and_consume(scope, write())
        assert found == grant
    kit.clock.advance(60)
    assert await kit.grants.find_and_consume(scope, write()) == (None, [])
    [expired] = await kit.grants.list(scope, include_inactive=True)
    assert expired.uses == 0


async def test_a_grant_without_ttl_never_expires(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(scope, ttl_s=None)

    kit.clock.advance(10 * 365 * 86_400)

    assert grant.expires_at is None
    assert (await kit.grants.find_and_consume(scope, write()))[0] == grant


async def test_the_digest_bound_grant_is_spent_before_a_standing_one(
    kit: Kit, scope: Scope
) -> None:
    call = write()
    standing = await kit.issue(scope)
    once = await kit.issue(scope, max_uses=1, args_digest=call.digest)

    first, _ = await kit.grants.find_and_consume(scope, call)
    second, _ = await kit.grants.find_and_consume(scope, call)
    other, refused = await kit.grants.find_and_consume(scope, write("/data/b.txt"))

    assert first is not None
    assert first.id == once.id
    assert second == standing
    assert other == standing
    assert refused == []


async def test_refusals_name_each_grant_passed_over(kit: Kit, scope: Scope) -> None:
    limited = await kit.issue(scope, path_prefix="/data")
    web = await kit.issue(scope, tool_pattern="fetch:*")

    found, refused = await kit.grants.find_and_consume(scope, write("/data/../etc/passwd"))

    assert found is None
    assert sorted(refused) == sorted(
        [
            f"{limited.id}: path '/etc/passwd' outside /data",
            f"{web.id}: tool outside fetch:*",
        ]
    )


async def test_a_new_policy_version_stops_old_grants(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(scope)
    newer = GrantService(kit.db, kit.audit, policy_version="0123456789ab", clock=kit.clock)

    assert await newer.find_and_consume(scope, write()) == (
        None,
        [f"{grant.id}: other policy version ({VERSION})"],
    )


async def test_other_tenants_and_principals_never_see_or_use_a_grant(
    kit: Kit, scope: Scope
) -> None:
    grant = await kit.issue(scope)
    others = [
        Scope("acme", "other", "erwan"),
        Scope("globex", "webapp", "erwan"),
        Scope("acme", "webapp", "bob"),
        Scope("acme", "webapp", "Erwan"),
    ]

    for other in others:
        assert await kit.grants.find_and_consume(other, write()) == (None, [])
    for other in others[:2]:
        assert await kit.grants.list(other, include_inactive=True) == []
        assert await kit.grants.get(other, grant.id) is None
        with pytest.raises(NotFound):
            await kit.grants.revoke(other, grant.id, decided_by="user:mallory")
        assert await kit.grants.revoke_all(other, decided_by="user:mallory") == 0
    assert await kit.grants.list(scope, principal="bob") == []
    assert (await kit.grants.find_and_consume(scope, write()))[0] == grant


async def test_revoking_stops_a_grant_and_keeps_the_first_time(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(scope)
    kit.clock.advance(5)

    revoked = await kit.grants.revoke(scope, grant.id, decided_by="user:erwan")
    kit.clock.advance(5)
    again = await kit.grants.revoke(scope, grant.id, decided_by="user:erwan")

    assert revoked.revoked is True
    assert revoked.revoked_at == START + timedelta(seconds=5)
    assert again.revoked_at == revoked.revoked_at
    assert await kit.grants.find_and_consume(scope, write()) == (None, [])
    assert await kit.grants.list(scope) == []
    assert kit.audit.names() == ["PERMISSION_GRANTED", "PERMISSION_REVOKED", "PERMISSION_REVOKED"]
    assert kit.audit.events[1].details["grant_id"] == grant.id


@pytest.mark.parametrize(
    "grant_id",
    [
        "00000000-0000-0000-0000-000000000000",
        "nope",
        "'; DROP TABLE permission_grants; --",
        "x" * 10_000,
        "‮gnp.exe",
        "",
    ],
)
async def test_revoking_an_unknown_grant_is_not_found(
    kit: Kit, scope: Scope, grant_id: str
) -> None:
    kept = await kit.issue(scope)

    with pytest.raises(NotFound) as caught:
        await kit.grants.revoke(scope, grant_id, decided_by="user:erwan")

    assert caught.value.message.startswith("Grant not found: ")
    assert len(caught.value.message) < 120
    assert await kit.grants.list(scope) == [kept]


@pytest.mark.parametrize("grant_id", [None, 42, ["x"]])
async def test_revoking_with_a_non_string_id_is_invalid_input(
    kit: Kit, scope: Scope, grant_id: Any
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await kit.grants.revoke(scope, grant_id, decided_by="user:erwan")

    assert caught.value.data == {"field": "grant_id"}


async def test_revoke_all_revokes_one_tenant_or_one_principal(kit: Kit, scope: Scope) -> None:
    bob = Scope("acme", "webapp", "bob")
    elsewhere = Scope("acme", "other", "erwan")
    await kit.issue(scope)
    await kit.issue(scope)
    await kit.issue(bob)
    kept = await kit.issue(elsewhere)

    assert await kit.grants.revoke_all(scope, principal="bob", decided_by="user:erwan") == 1
    assert [g.principal for g in await kit.grants.list(scope)] == ["erwan", "erwan"]
    assert await kit.grants.revoke_all(scope, decided_by="user:erwan") == 2
    assert await kit.grants.list(scope) == []
    assert await kit.grants.list(elsewhere) == [kept]
    assert kit.audit.events[-1].event == "PERMISSION_REVOKED"
    assert kit.audit.events[-1].details == {"all": True, "principal": None, "count": 2}


async def test_purge_deletes_dead_grants_and_keeps_recent_revocations(
    kit: Kit, scope: Scope
) -> None:
    alive = await kit.issue(scope, ttl_s=3600)
    forever = await kit.issue(scope, ttl_s=None)
    await kit.issue(scope, ttl_s=10)  # expires
    used = await kit.issue(scope, ttl_s=None, max_uses=1, tool_pattern="fs:used")
    old_revoked = await kit.issue(scope, ttl_s=None)
    await kit.grants.revoke(scope, old_revoked.id, decided_by="user:erwan")
    await kit.grants.find_and_consume(scope, CallFacts.of("fs", "used", "file_write", {}))
    kit.clock.advance(86_400 - 100)
    recent = await kit.issue(scope, ttl_s=None)
    await kit.grants.revoke(scope, recent.id, decided_by="user:erwan")
    kit.clock.advance(200)
    events_before = len(kit.audit.events)

    assert await kit.grants.purge_expired() == 4
    remaining = {g.id for g in await kit.grants.list(scope, include_inactive=True)}
    assert remaining == {forever.id, recent.id}
    assert used.id not in remaining
    assert alive.id not in remaining  # its hour is over too
    assert await kit.grants.purge_expired() == 0
    assert len(kit.audit.events) == events_before


@pytest.mark.parametrize(
    ("options", "field_name"),
    [
        ({"capability": "root"}, "capability"),
        ({"capability": "FILE_WRITE"}, "capability"),
        ({"capability": None}, "capability"),
        ({"tool_pattern": "fs"}, "tool_pattern"),
        ({"tool_pattern": ":x"}, "tool_pattern"),
        ({"tool_pattern": "fs:" + "x" * 200}, "tool_pattern"),
        ({"tool_pattern": "fs:a\nb"}, "tool_pattern"),
        ({"tool_pattern": 7}, "tool_pattern"),
        ({"path_prefix": "data"}, "path_prefix"),
        ({"path_prefix": "~/data"}, "path_prefix"),
        ({"path_prefix": "C:\\data"}, "path_prefix"),
        ({"path_prefix": "/data\\x"}, "path_prefix"),
        ({"path_prefix": "/da\x00ta"}, "path_prefix"),
        ({"path_prefix": "/" + "d" * 2000}, "path_prefix"),
        ({"path_prefix": 5}, "path_prefix"),
        ({"domain": "https://example.com"}, "domain"),
        ({"domain": "example.com/x"}, "domain"),
        ({"domain": "ex ample.com"}, "domain"),
        ({"domain": "-bad.com"}, "domain"),
        ({"domain": "a" * 64 + ".com"}, "domain"),
        ({"domain": ""}, "domain"),
        ({"domain": "exa\u202emple.com"}, "domain"),
        ({"domain": ["example.com"]}, "domain"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": -5}, "ttl_s"),
        ({"ttl_s": float("nan")}, "ttl_s"),
        ({"ttl_s": float("inf")}, "ttl_s"),
        ({"ttl_s": 1e300}, "ttl_s"),
        ({"ttl_s": True}, "ttl_s"),
        ({"ttl_s": "60"}, "ttl_s"),
        ({"max_uses": 0}, "max_uses"),
        ({"max_uses": -1}, "max_uses"),
        ({"max_uses": 2**40}, "max_uses"),
        ({"max_uses": 1.5}, "max_uses"),
        ({"max_uses": True}, "max_uses"),
        ({"purpose": "p" * 501}, "purpose"),
        ({"purpose": 3}, "purpose"),
        ({"args_digest": "xyz"}, "args_digest"),
        ({"args_digest": "ABCDEF0123456789"}, "args_digest"),
        ({"args_digest": "0" * 65}, "args_digest"),
        ({"decided_by": ""}, "decided_by"),
        ({"decided_by": "u" * 201}, "decided_by"),
    ],
)
async def test_invalid_input_names_the_field_and_stores_nothing(
    kit: Kit, scope: Scope, options: dict[str, Any], field_name: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await kit.issue(scope, **options)

    assert caught.value.data == {"field": field_name}
    assert field_name in caught.value.message
    assert len(caught.value.message) < 300
    assert await count_rows(kit.db) == 0
    assert kit.audit.events == []


async def test_limits_at_their_bounds_are_accepted(kit: Kit, scope: Scope) -> None:
    grant = await kit.issue(
        Scope("acme", "webapp", "ü" * 128),
        capability="unknown",
        tool_pattern="*",
        path_prefix="/",
        domain="bücher.de",
        purpose="p" * 500,
        ttl_s=0.001,
        max_uses=2**31 - 1,
        args_digest="a" * 64,
    )

    assert grant.scope.tool == "*:*"
    assert grant.scope.domain == "xn--bcher-kva.de"
    assert [g.id for g in await kit.grants.list(scope, principal="ü" * 128)] == [grant.id]


async def test_candidates_are_indexed_by_tenant_principal_and_capability(
    kit: Kit, scope: Scope
) -> None:
    await kit.issue(scope, capability="file_read")
    wanted = await kit.issue(scope)

    async with kit.db.read() as conn:
        rows = await SqlGrantRepository(conn).candidates(
            "acme", "webapp", "erwan", "file_write", START
        )

    assert [row["id"] for row in rows] == [wanted.id]


@pytest.fixture
async def two_databases(database_url: str) -> AsyncGenerator[tuple[Database, Database]]:
    first = await Database.open(database_url)
    second = await Database.open(database_url, migrate=False)
    yield first, second
    await first.close()
    await second.close()


async def _until_waiting_on_a_lock(db: Database) -> None:
    """Return once a session of this PostgreSQL database waits on a lock (polled)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    while True:
        async with db.read() as conn:
            if (await conn.execute(query)).scalar_one():
                return
        await anyio.sleep(0.01)


async def test_two_connections_consuming_a_once_grant_have_exactly_one_winner(
    two_databases: tuple[Database, Database], scope: Scope
) -> None:
    first, second = two_databases
    grant = await GrantService(first, RecordingAuditor(), policy_version=VERSION).issue(
        scope,
        capability="file_write",
        ttl_s=None,
        max_uses=1,
        decided_by="user:erwan",
    )
    now = datetime.now(UTC)
    won: dict[str, bool] = {}

    async def second_consumer() -> None:
        async with second.transaction() as conn:
            won["second"] = await SqlGrantRepository(conn).consume(grant.id, now)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks, first.transaction() as conn:
            won["first"] = await SqlGrantRepository(conn).consume(grant.id, now)
            tasks.start_soon(second_consumer)
            if first.dialect == "postgresql":
                # Commit only once the second UPDATE waits on the row the first one holds.
                await _until_waiting_on_a_lock(second)

    assert won == {"first": True, "second": False}
    async with first.read() as conn:
        stored = await SqlGrantRepository(conn).get(grant.id)
    assert stored is not None
    assert stored["uses"] == 1


async def test_concurrent_callers_spend_each_once_grant_exactly_once(
    two_databases: tuple[Database, Database], scope: Scope
) -> None:
    first, _ = two_databases
    services = [
        GrantService(db, RecordingAuditor(), policy_version=VERSION) for db in two_databases
    ]
    issued = {
        (
            await services[0].issue(
                scope, capability="file_write", ttl_s=None, max_uses=1, decided_by="user:erwan"
            )
        ).id
        for _ in range(3)
    }
    winners: list[str] = []
    losers: list[list[str]] = []

    async def caller(service: GrantService) -> None:
        grant, refused = await service.find_and_consume(scope, write())
        if grant is None:
            losers.append(refused)
        else:
            winners.append(grant.id)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for index in range(12):
                tasks.start_soon(caller, services[index % 2])

    assert sorted(winners) == sorted(issued)
    assert len(losers) == 9
    for refused in losers:
        assert all(reason.endswith(": used up by a concurrent call") for reason in refused)
    assert await services[1].list(scope) == []
    assert await count_rows(first) == 3
