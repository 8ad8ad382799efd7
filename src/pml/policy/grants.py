"""Permission grants (SPEC §10.4): issue, find-and-spend, list, revoke, purge.

    grants = GrantService(db, auditor, policy_version="3f2a9c01")
    grant = await grants.issue(scope, capability="file_write", tool_pattern="fs:write_*",
                               path_prefix="/data", ttl_s=900, max_uses=1,
                               args_digest=None, decided_by="user:erwan")
    call = CallFacts.of("fs", "write_file", "file_write", {"path": "/data/a.txt"})
    used, refused = await grants.find_and_consume(scope, call)   # (grant, []) once...
    used, refused = await grants.find_and_consume(scope, call)   # (None, []): spent

A grant belongs to one principal (``scope.user``) in one org/project; nobody else sees or
uses it. Limited-use grants are spent with one atomic ``UPDATE``; when a concurrent caller
spends the last use first, the next covering grant is tried. Unlimited grants are not
counted (no write on the hot path). Issuing and revoking emit ``PERMISSION_GRANTED`` /
``PERMISSION_REVOKED``; ``purge_expired`` deletes dead tokens and emits nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from pml.errors import NotFound
from pml.policy.grant_inputs import (
    MAX_DECIDED_BY,
    MAX_PURPOSE,
    check_capability,
    check_digest,
    check_domain,
    check_max_uses,
    check_path_prefix,
    check_text,
    check_tool_pattern,
    check_ttl,
    invalid,
)
from pml.policy.grant_stamp import GrantStamp
from pml.policy.model import CAPABILITIES, Auditor, PermissionCapability
from pml.policy.permissions import CallFacts, Grant, GrantScope, choose_grant
from pml.registry.fqdn import message_value
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.grant_repo import Row, SqlGrantRepository
from pml.storage.tables import permission_grants
from pml.storage.types import utc_now

GRANT_ID = re.compile(r"[0-9a-f-]{1,36}")
GRANT_CACHE_KEYS = 4096
_BY_ID = sa.select(permission_grants).where(
    permission_grants.c.id == sa.bindparam("grant_id", type_=sa.String())
)
_CacheKey = tuple[str, str, str, str]
# How long cached grants are trusted on the stamp's word alone (bounds the effect of a
# process that died between a commit and its bump).
TRUST_S = 5.0


@dataclass(frozen=True, slots=True)
class _Cached:
    pool: list[Grant]
    token: object | None
    read_at: float


def _stored_capability(value: object) -> PermissionCapability:
    for capability in CAPABILITIES:
        if value == capability:
            return capability
    return "unknown"


def grant_from_row(row: Row) -> Grant:
    """A stored grant (an unknown stored capability reads as ``unknown``)."""
    capability = _stored_capability(row["capability"])
    return Grant(
        id=row["id"],
        principal=row["principal"],
        org=row["org"],
        project=row["project"],
        capability=capability,
        scope=GrantScope.from_dict(row["scope"]),
        purpose=row["purpose"],
        issued_at=row["issued_at"],
        expires_at=row["expires_at"],
        max_uses=row["max_uses"],
        uses=row["uses"],
        args_digest=row["args_digest"],
        policy_version=row["policy_version"],
        revoked=bool(row["revoked"]),
        revoked_at=row["revoked_at"],
    )


class GrantService:
    """Grants of one database, stamped with and checked against one policy version."""

    def __init__(
        self,
        db: Database,
        auditor: Auditor,
        *,
        policy_version: str,
        clock: Callable[[], datetime] = utc_now,
        stamp: GrantStamp | None = None,
        trust_s: float = TRUST_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._auditor = auditor
        self.policy_version = policy_version
        self._clock = clock
        self._stamp = stamp
        self._trust_s = trust_s
        self._monotonic = monotonic
        # (org, project, principal, capability) -> that principal's grants as last read,
        # the stamp token seen before reading them, and when.
        self._cache: OrderedDict[_CacheKey, _Cached] = OrderedDict()

    async def issue(
        self,
        scope: Scope,
        *,
        capability: str,
        tool_pattern: str = "*:*",
        path_prefix: str | None = None,
        domain: str | None = None,
        purpose: str | None = None,
        ttl_s: float | None,
        max_uses: int | None,
        args_digest: str | None = None,
        decided_by: str,
        actor: str | None = None,
    ) -> Grant:
        """Store a new grant for ``scope.user`` in ``scope``'s org/project.

        ``ttl_s`` None never expires; ``max_uses`` None is unlimited. Every field is
        validated first (INVALID_INPUT naming it); nothing is stored on a bad one.
        """
        now = self._clock()
        ttl = check_ttl(ttl_s)
        grant = Grant(
            id=str(uuid.uuid4()),
            principal=scope.user,
            org=scope.org,
            project=scope.project,
            capability=check_capability(capability),
            scope=GrantScope(
                tool=check_tool_pattern(tool_pattern),
                path_prefix=check_path_prefix(path_prefix),
                domain=check_domain(domain),
            ),
            purpose=check_text("purpose", purpose, MAX_PURPOSE, optional=True),
            issued_at=now,
            expires_at=now + timedelta(seconds=ttl) if ttl is not None else None,
            max_uses=check_max_uses(max_uses),
            uses=0,
            args_digest=check_digest(args_digest),
            policy_version=self.policy_version,
            revoked=False,
        )
        who = check_text("decided_by", decided_by, MAX_DECIDED_BY, optional=False)
        async with self._db.transaction() as conn:
            await SqlGrantRepository(conn).insert(_row(grant))
        self._bump()
        self._auditor.emit(
            "PERMISSION_GRANTED",
            scope=scope,
            details=_details(grant),
            decided_by=who,
            actor=actor,
        )
        return grant

    async def find_and_consume(
        self, scope: Scope, call: CallFacts
    ) -> tuple[Grant | None, list[str]]:
        """The grant covering ``call`` for ``scope.user`` (a use spent if limited), and the
        refusal reasons of the grants passed over (for the audit).

        The principal's grants are cached. A cached unlimited grant is used as it is while
        the grant stamp says no process changed grants (SQLite, for ``TRUST_S`` at most);
        otherwise it is confirmed by one point read of its row, so another process's
        revocation counts at once. Anything else reads the grants again."""
        now = self._clock()
        key = (scope.org, scope.project, scope.user, call.capability)
        cached = self._cache.get(key)
        if cached is not None:
            grant, _ = self._choose(cached.pool, call, scope, now)
            if grant is not None and grant.max_uses is None:
                if self._unchanged(cached):
                    return grant, []
                live = await self._live(grant.id)
                if live is not None and self._choose([live], call, scope, now)[0] is not None:
                    return live, []
        token = self._stamp.token() if self._stamp is not None else None
        async with self._db.read() as conn:
            rows = await SqlGrantRepository(conn).candidates(
                scope.org, scope.project, scope.user, call.capability, now
            )
        pool = [grant_from_row(row) for row in rows]
        self._remember(key, _Cached(pool, token, self._monotonic()))
        reasons: list[str] = []
        while True:
            grant, refused = self._choose(pool, call, scope, now)
            reasons.extend(refused)
            if grant is None or grant.max_uses is None:
                return grant, reasons
            async with self._db.transaction() as conn:
                won = await SqlGrantRepository(conn).consume(grant.id, now)
            self._bump()
            if won:
                return replace(grant, uses=grant.uses + 1), reasons
            reasons.append(f"{grant.id}: used up by a concurrent call")
            pool = [other for other in pool if other.id != grant.id]

    def _choose(
        self, pool: list[Grant], call: CallFacts, scope: Scope, now: datetime
    ) -> tuple[Grant | None, list[str]]:
        return choose_grant(
            pool,
            call,
            now=now,
            policy_version=self.policy_version,
            principal=scope.user,
            org=scope.org,
            project=scope.project,
        )

    async def _live(self, grant_id: str) -> Grant | None:
        """The grant's row as it is now (one indexed point read)."""
        row = await self._db.first(_BY_ID, {"grant_id": grant_id})
        return grant_from_row(row._mapping) if row is not None else None  # pyright: ignore[reportPrivateUsage]

    def _unchanged(self, cached: _Cached) -> bool:
        """Whether no process has changed grants since ``cached`` was read."""
        if self._stamp is None or cached.token is None:
            return False
        if self._monotonic() - cached.read_at > self._trust_s:
            return False
        return self._stamp.token() == cached.token

    def _bump(self) -> None:
        if self._stamp is not None:
            self._stamp.bump()

    def _remember(self, key: _CacheKey, cached: _Cached) -> None:
        self._cache[key] = cached
        self._cache.move_to_end(key)
        while len(self._cache) > GRANT_CACHE_KEYS:
            self._cache.popitem(last=False)

    async def get(self, scope: Scope, grant_id: str) -> Grant | None:
        """The grant with this id in ``scope``'s org/project, whatever its state."""
        if not isinstance(grant_id, str) or not GRANT_ID.fullmatch(grant_id):  # pyright: ignore[reportUnnecessaryIsInstance]
            return None
        async with self._db.read() as conn:
            row = await SqlGrantRepository(conn).get(grant_id)
        if row is None or (row["org"], row["project"]) != (scope.org, scope.project):
            return None
        return grant_from_row(row)

    async def list(
        self, scope: Scope, *, principal: str | None = None, include_inactive: bool = False
    ) -> list[Grant]:
        """Grants of ``scope``'s org/project (of every principal unless one is given),
        oldest first; only live ones unless ``include_inactive``."""
        who = check_text("principal", principal, 128, optional=True)
        async with self._db.read() as conn:
            rows = await SqlGrantRepository(conn).list(
                scope.org,
                scope.project,
                principal=who,
                active_only=not include_inactive,
                now=self._clock(),
            )
        return [grant_from_row(row) for row in rows]

    async def revoke(self, scope: Scope, grant_id: str, *, decided_by: str) -> Grant:
        """Revoke one grant of ``scope``'s org/project (NOT_FOUND elsewhere); revoking
        twice keeps the first revocation time."""
        if not isinstance(grant_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise invalid("grant_id", f"{grant_id!r:.80} is not a grant id")
        if not GRANT_ID.fullmatch(grant_id):
            raise NotFound(f"Grant not found: {message_value(grant_id)}")
        async with self._db.transaction() as conn:
            row = await SqlGrantRepository(conn).revoke(
                grant_id, scope.org, scope.project, self._clock()
            )
        self._bump()
        grant = grant_from_row(row)
        self._auditor.emit(
            "PERMISSION_REVOKED", scope=scope, details=_details(grant), decided_by=decided_by
        )
        return grant

    async def revoke_all(
        self, scope: Scope, *, principal: str | None = None, decided_by: str
    ) -> int:
        """Revoke every grant of ``scope``'s org/project (or of one principal); how many."""
        who = check_text("principal", principal, 128, optional=True)
        async with self._db.transaction() as conn:
            count = await SqlGrantRepository(conn).revoke_all(
                scope.org, scope.project, self._clock(), principal=who
            )
        self._bump()
        self._auditor.emit(
            "PERMISSION_REVOKED",
            scope=scope,
            details={"all": True, "principal": who, "count": count},
            decided_by=decided_by,
        )
        return count

    async def purge_expired(self) -> int:
        """Delete expired and used-up grants of every tenant, and those revoked over a day
        ago; how many. Emits nothing: the post-hook that calls it audits its own clean-up
        (``POSTHOOK_CLEANUP``) in the scope of the request it runs for."""
        async with self._db.transaction() as conn:
            purged = await SqlGrantRepository(conn).purge_expired(self._clock())
        if purged:
            self._bump()
        return purged


def _row(grant: Grant) -> dict[str, Any]:
    return {
        "id": grant.id,
        "principal": grant.principal,
        "org": grant.org,
        "project": grant.project,
        "capability": grant.capability,
        "scope": grant.scope.to_dict(),
        "purpose": grant.purpose,
        "issued_at": grant.issued_at,
        "expires_at": grant.expires_at,
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "args_digest": grant.args_digest,
        "policy_version": grant.policy_version,
        "revoked": grant.revoked,
    }


def _details(grant: Grant) -> dict[str, Any]:
    return {
        "grant_id": grant.id,
        "principal": grant.principal,
        "capability": grant.capability,
        "scope": grant.scope.to_dict(),
        "purpose": grant.purpose,
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
        "max_uses": grant.max_uses,
        "args_digest": grant.args_digest,
        "policy_version": grant.policy_version,
    }
