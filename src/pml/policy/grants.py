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

import math
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from pml.errors import InvalidInput, NotFound
from pml.policy.arguments import ascii_host, normalise_path
from pml.policy.model import CAPABILITIES, Auditor, PermissionCapability
from pml.policy.permissions import CallFacts, Grant, GrantScope, choose_grant
from pml.policy.tool_patterns import BadPattern, split_pattern
from pml.registry.fqdn import message_value
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.grant_repo import Row, SqlGrantRepository
from pml.storage.types import utc_now

MAX_TOOL_PATTERN = 200
MAX_PURPOSE = 500
MAX_PATH_PREFIX = 1024
MAX_DECIDED_BY = 200
MAX_USES = 2**31 - 1
MAX_TTL_S = 100 * 365 * 86_400.0
DIGEST = re.compile(r"[0-9a-f]{16,64}")
HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
GRANT_ID = re.compile(r"[0-9a-f-]{1,36}")


def _invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"Invalid {field}: {message}", field=field)


def check_capability(value: object) -> PermissionCapability:
    """The value as a permission capability, or INVALID_INPUT naming the allowed ones."""
    for capability in CAPABILITIES:
        if value == capability:
            return capability
    raise _invalid("capability", f"{value!r}. Use one of: {', '.join(CAPABILITIES)}.")


def check_tool_pattern(value: object) -> str:
    """A ``server:tool`` glob of at most 200 characters (``*`` stands for ``*:*``)."""
    if isinstance(value, str) and len(value) > MAX_TOOL_PATTERN:
        raise _invalid("tool_pattern", f"longer than {MAX_TOOL_PATTERN} characters")
    try:
        server, tool = split_pattern(value)
    except BadPattern as error:
        raise _invalid("tool_pattern", str(error)) from None
    return f"{server}:{tool}"


def check_path_prefix(value: object) -> str | None:
    """An absolute POSIX path, normalised (``/data/../x`` is ``/x``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise _invalid("path_prefix", f"{value!r:.80} is not an absolute path")
    if len(value) > MAX_PATH_PREFIX or "\\" in value or not value.isprintable():
        raise _invalid("path_prefix", "too long, or has a backslash or control character")
    return normalise_path(value)


def check_domain(value: object) -> str | None:
    """A host name (IDNA allowed), stored lower-case ASCII."""
    if value is None:
        return None
    host = ascii_host(value) if isinstance(value, str) and value.isprintable() else None
    if (
        host is None
        or len(host) > 253
        or not all(HOST_LABEL.fullmatch(label) for label in host.split("."))
    ):
        raise _invalid("domain", f"{value!r:.80} is not a host name")
    return host


def _check_ttl(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid("ttl_s", f"{value!r:.80} is not a number of seconds")
    if not math.isfinite(value) or value <= 0 or value > MAX_TTL_S:
        raise _invalid("ttl_s", "must be more than 0 and at most 100 years")
    return float(value)


def _check_max_uses(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_USES:
        raise _invalid("max_uses", f"{value!r:.80} is not a whole number of at least 1")
    return value


def _check_text(field: str, value: object, limit: int, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit or (not optional and not value):
        raise _invalid(field, f"must be a string of at most {limit} characters")
    return value


def _check_digest(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not DIGEST.fullmatch(value):
        raise _invalid("args_digest", "must be 16-64 lower-case hex characters")
    return value


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
    ) -> None:
        self._db = db
        self._auditor = auditor
        self.policy_version = policy_version
        self._clock = clock

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
        ttl = _check_ttl(ttl_s)
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
            purpose=_check_text("purpose", purpose, MAX_PURPOSE, optional=True),
            issued_at=now,
            expires_at=now + timedelta(seconds=ttl) if ttl is not None else None,
            max_uses=_check_max_uses(max_uses),
            uses=0,
            args_digest=_check_digest(args_digest),
            policy_version=self.policy_version,
            revoked=False,
        )
        who = _check_text("decided_by", decided_by, MAX_DECIDED_BY, optional=False)
        async with self._db.transaction() as conn:
            await SqlGrantRepository(conn).insert(_row(grant))
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
        refusal reasons of the grants passed over (for the audit)."""
        now = self._clock()
        async with self._db.read() as conn:
            rows = await SqlGrantRepository(conn).candidates(
                scope.org, scope.project, scope.user, call.capability, now
            )
        pool = [grant_from_row(row) for row in rows]
        reasons: list[str] = []
        while True:
            grant, refused = choose_grant(
                pool,
                call,
                now=now,
                policy_version=self.policy_version,
                principal=scope.user,
                org=scope.org,
                project=scope.project,
            )
            reasons.extend(refused)
            if grant is None or grant.max_uses is None:
                return grant, reasons
            async with self._db.transaction() as conn:
                won = await SqlGrantRepository(conn).consume(grant.id, now)
            if won:
                return replace(grant, uses=grant.uses + 1), reasons
            reasons.append(f"{grant.id}: used up by a concurrent call")
            pool = [other for other in pool if other.id != grant.id]

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
        who = _check_text("principal", principal, 128, optional=True)
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
            raise _invalid("grant_id", f"{grant_id!r:.80} is not a grant id")
        if not GRANT_ID.fullmatch(grant_id):
            raise NotFound(f"Grant not found: {message_value(grant_id)}")
        async with self._db.transaction() as conn:
            row = await SqlGrantRepository(conn).revoke(
                grant_id, scope.org, scope.project, self._clock()
            )
        grant = grant_from_row(row)
        self._auditor.emit(
            "PERMISSION_REVOKED", scope=scope, details=_details(grant), decided_by=decided_by
        )
        return grant

    async def revoke_all(
        self, scope: Scope, *, principal: str | None = None, decided_by: str
    ) -> int:
        """Revoke every grant of ``scope``'s org/project (or of one principal); how many."""
        who = _check_text("principal", principal, 128, optional=True)
        async with self._db.transaction() as conn:
            count = await SqlGrantRepository(conn).revoke_all(
                scope.org, scope.project, self._clock(), principal=who
            )
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
            return await SqlGrantRepository(conn).purge_expired(self._clock())


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
