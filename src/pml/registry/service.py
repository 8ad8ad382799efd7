"""The capability registry: every rule about identity, names, aliases, versions and usage.

    registry = CapabilityRegistry(db, routing=RoutingRules(cloud=["search-*"]))
    result = await registry.capture(scope, CapabilityDraft(code=..., intent=..., tools_used=[...]),
                                    latency_ms=12.5)
    found = await registry.resolve(scope, "fs:read_json@v1")
    await registry.rename(scope, "unnamed_a7f3b2c1", RenameChanges(new_name="fs:read_json"))

Every write is one transaction: it either happens whole or leaves no trace. Name changes in
a scope are serialised (an advisory lock on PostgreSQL, the single writer on SQLite), and
the unique indexes are the last line of defence against races.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any

from pml.errors import InvalidInput, NotFound
from pml.policy.model import Auditor
from pml.registry import creation, naming
from pml.registry.changes import UNNAMED_CAPTURE, ChangeAnnouncer, ChangeListener
from pml.registry.fqdn import Fqdn, message_value
from pml.registry.intents import IntentRecord
from pml.registry.models import (
    CapabilityDraft,
    CapabilityRecord,
    CaptureResult,
    ListQuery,
    Page,
    RenameChanges,
    Resolved,
    RoutingRules,
    VersionRecord,
    Whois,
)
from pml.registry.names import validate_name
from pml.registry.records import (
    check_ref,
    check_version_tag,
    current_version,
    summarise_change,
    version_of,
    without_spec,
)
from pml.registry.routing import Routing, resolve_routing
from pml.registry.scope import Scope, Visibility, check_visibility
from pml.registry.servers import ServerRegistration, register_server
from pml.registry.versions import parse_version_spec, select_version, split_name_and_spec
from pml.storage.capability_repo import (
    CodeOwner,
    SqlCapabilityRepository,
    find_code_owner,
    resolve_reference,
)
from pml.storage.capability_writes import count_capabilities
from pml.storage.database import Database
from pml.storage.intent_repo import SqlIntentRepository, remember_now
from pml.storage.types import utc_now
from pml.storage.usage_repo import CAPABILITY_SERVER_ID, SqlToolUsageRepository, ToolUsageSummary
from pml.storage.version_reads import version_at, version_heads

logger = logging.getLogger(__name__)

MAX_REF_LENGTH = 400


class CapabilityRegistry:
    """Creates, names, versions, resolves and counts capabilities in their scopes."""

    def __init__(
        self,
        db: Database,
        *,
        routing: RoutingRules | None = None,
        clock: Callable[[], datetime] = utc_now,
        capabilities_per_project: int = 0,
    ) -> None:
        self._db = db
        self.routing = routing or RoutingRules()  # [routing]; a reload replaces it
        # [limits] capabilities_per_project: active capabilities a project may hold (0: any).
        # A capture past it is refused with LIMIT_EXCEEDED; a reload replaces it.
        self.capabilities_per_project = capabilities_per_project
        self._clock = clock
        self._changes = ChangeAnnouncer(db)
        # Where renames are audited (``CAPABILITY_RENAMED``), when a policy pipeline runs.
        self.auditor: Auditor | None = None

    @property
    def origin(self) -> str:
        """This registry's identity in change announcements (to skip its own echo)."""
        return self._changes.origin

    def on_change(self, listener: ChangeListener) -> None:
        """Call ``listener`` after every committed change of a capability's tool face."""
        self._changes.subscribe(listener)

    # -- reads ---------------------------------------------------------------------------

    async def resolve(self, scope: Scope, ref: object) -> Resolved:
        """The record and version a reference designates (name, alias, FQDN, tool name, @spec)."""
        name, spec = split_name_and_spec(check_ref(ref))
        found = (
            await resolve_reference(self._db, scope, name) if len(name) <= MAX_REF_LENGTH else None
        )
        if found is None:
            raise NotFound(f"Capability not found: {message_value(ref)}")
        record, via_alias = found
        if spec is None or spec == "latest":
            version = current_version(record)
        else:
            parsed = parse_version_spec(spec, name)
            async with self._db.read() as conn:  # by number, tag and date: not every code
                head = select_version(await version_heads(conn, record.fqdn), parsed, name)
                version = await version_at(conn, record.fqdn, head.version)
        if via_alias is not None:
            logger.warning(
                'Deprecated: Using alias "%s" for capability "%s". Update your code.',
                via_alias,
                record.display_name,
            )
        return Resolved(record=record, version=version, via_alias=via_alias)

    async def whois(self, scope: Scope, fqdn: object) -> Whois:
        """The full record behind an FQDN, its aliases and version count."""
        parsed = str(Fqdn.parse(fqdn))
        async with self._db.read() as conn:
            repo = SqlCapabilityRepository(conn)
            record = await repo.get_visible(scope, parsed)
            if record is None:
                raise NotFound(f"Capability not found: {parsed}")
            return Whois(record, await repo.aliases_of(parsed), await repo.count_versions(parsed))

    async def history(
        self, scope: Scope, ref: object, newest: int | None = None, before: int | None = None
    ) -> tuple[CapabilityRecord, list[VersionRecord], dict[str, str] | None]:
        """A record, its (``newest``, older than ``before``) versions newest first, and the
        alias warning if an old name was used."""
        resolved = await self.resolve(scope, without_spec(ref, "cap_history"))
        async with self._db.read() as conn:
            repo = SqlCapabilityRepository(conn)
            versions = await repo.versions_of(resolved.record.fqdn, newest, before)
        return resolved.record, list(reversed(versions)), resolved.deprecated_alias

    async def usage_of(self, scope: Scope, fqdn: str) -> ToolUsageSummary | None:
        """The ``tool_usage`` totals of a capability's calls made from ``scope``'s project."""
        async with self._db.read() as conn:
            found = await SqlToolUsageRepository(conn).summary(
                scope.org, scope.project, server_id=CAPABILITY_SERVER_ID, tool_name=fqdn, limit=1
            )
        return found[0] if found else None

    async def intents_of(self, fqdn: str) -> list[IntentRecord]:
        """The intents remembered for ``fqdn`` (``pml.registry.intents``), newest first."""
        async with self._db.read() as conn:
            return (await SqlIntentRepository(conn).of([fqdn]))[fqdn]

    async def find_by_code(self, scope: Scope, code_hash: str) -> CodeOwner | None:
        """The capability of the caller's org/project whose current code has this hash."""
        return await find_code_owner(self._db, scope.org, scope.project, code_hash)

    async def list(self, scope: Scope, query: ListQuery) -> Page:
        """One page of what ``scope`` may see."""
        async with self._db.read() as conn:
            return await SqlCapabilityRepository(conn).list_visible(scope, query)

    async def counts(self, scope: Scope) -> dict[str, int]:
        """Named and unnamed capabilities and MCP servers visible to ``scope``."""
        async with self._db.read() as conn:
            return await SqlCapabilityRepository(conn).count_by_type(scope)

    # -- writes --------------------------------------------------------------------------

    async def capture(
        self, scope: Scope, draft: CapabilityDraft, *, latency_ms: float
    ) -> CaptureResult:
        """Record a successful run: the same normalised code in a scope is one capability.

        New code is first offered to one guarded statement (``insert_if_free``); only when
        its first names are taken, the code was captured meanwhile or the project is at its
        quota does the careful path run, under the scope's lock, and say which."""
        code_hash = naming.check_code_hash(draft.code, draft.code_hash, parsed=draft.code_parsed)
        checked = naming.checked_draft(draft)
        latency_ms = naming.check_latency(latency_ms)
        name = validate_name(draft.name) if draft.name is not None else None
        tags = naming.check_tags(draft.tags)
        draft = replace(checked, tags=tags, visibility=check_visibility(draft.visibility))
        now = self._clock()
        result = await self._create(scope, draft, code_hash, name, latency_ms, now)
        if result is not None:
            return result
        async with self.write(scope) as repo:
            existing = await repo.find_by_code_hash(scope.org, scope.project, code_hash)
            if existing is not None:
                await repo.record_usage(existing.fqdn, success=True, latency_ms=latency_ms, at=now)
                named_now = name is not None and not existing.named
                if name is not None and named_now and name != existing.display_name:
                    await naming.apply_new_name(repo, scope, existing, name, now)
                record = await repo.get(existing.fqdn)
                assert record is not None
                result = CaptureResult(record=record, created=False)
            else:
                named_now = name is not None
                quota = self.capabilities_per_project
                conn = repo.conn
                if quota > 0 and await count_capabilities(conn, scope.org, scope.project) >= quota:
                    raise naming.quota_exceeded(scope, quota)
                routing = await creation.routing_of(
                    self.routing, draft.tools_used, draft.routing, creation.lookup_in(repo, scope)
                )
                record = await creation.free_record(
                    repo, scope, draft, code_hash, name, routing, now
                )
                record = creation.first_use(record, draft, latency_ms, now)
                await repo.insert_record(record)
                await repo.insert_version(
                    version_of(record, change_summary=draft.change_summary or "created")
                )
                if record.version_tag is not None:
                    await repo.insert_version_tag(record, record.version_tag)
                result = CaptureResult(record=record, created=True)
        if named_now:
            await self.announce(scope, result.record.fqdn, "named")
        elif result.created:
            # unnamed: no tool list changes, but discovery and curation follow it
            await self.announce(scope, result.record.fqdn, UNNAMED_CAPTURE)
        return result

    async def check_name_before_run(self, scope: Scope, name: object, code_hash: str) -> str:
        """``INVALID_NAME`` / ``NAME_TAKEN`` / ``LIMIT_EXCEEDED`` (the project's quota) before
        running code to be captured as ``name`` (``naming.check_name_before_run``)."""
        quota = self.capabilities_per_project
        return await naming.check_name_before_run(self._db, scope, name, code_hash, quota=quota)

    async def update_code(
        self, scope: Scope, ref: object, draft: CapabilityDraft
    ) -> CapabilityRecord:
        """A new version of an existing capability (same FQDN, version + 1, history kept)."""
        code_hash = naming.check_code_hash(draft.code, draft.code_hash, parsed=draft.code_parsed)
        draft = naming.checked_draft(draft)
        tag = check_version_tag(draft.version_tag)
        now = self._clock()
        async with self.write(scope) as repo:
            record = await naming.owned(repo, scope, without_spec(ref, "update"))
            if code_hash == record.code_hash:
                return record
            other = await repo.find_by_code_hash(scope.org, scope.project, code_hash)
            if other is not None:
                raise InvalidInput(
                    f"This code is already capability '{other.display_name}' ({other.fqdn})",
                    field="code",
                )
            if tag is not None and any(  # numbers and tags only: no version's code
                v.version_tag == tag for v in await version_heads(repo.conn, record.fqdn)
            ):
                raise InvalidInput(
                    f"Version tag {tag} already exists for {record.display_name}",
                    field="version_tag",
                )
            tools = list(draft.tools_used)
            lookup = creation.lookup_in(repo, scope)
            routing = await creation.routing_of(
                self.routing, tools, record.routing_override, lookup
            )
            updated = replace(
                record,
                code=draft.code,
                code_hash=code_hash,
                intent=draft.intent or record.intent,
                description=draft.description or record.description,
                parameters_schema=draft.parameters_schema,
                tools_used=tools,
                routing=routing,
                version=record.version + 1,
                version_tag=tag,
                updated_by=scope.user,
                updated_at=now,
            )
            summary = draft.change_summary or summarise_change(record.code or "", draft.code)
            await repo.update_record(
                record.fqdn,
                **{k: getattr(updated, k) for k in naming.VERSIONED_FIELDS},
            )
            await repo.insert_version(version_of(updated, change_summary=summary))
            if tag is not None:
                await repo.insert_version_tag(updated, tag)
        await self.announce(scope, updated.fqdn, "versioned")
        return updated

    async def rename(self, scope: Scope, ref: object, changes: RenameChanges) -> CapabilityRecord:
        """Change a record's name and metadata atomically; the old name becomes an alias."""
        new_name = validate_name(changes.new_name) if changes.new_name is not None else None
        values: dict[str, Any] = {}
        if changes.description is not None:
            values["description"] = naming.check_description(changes.description)
        if changes.tags is not None:
            values["tags"] = naming.check_tags(changes.tags)
        if changes.visibility is not None:
            values["visibility"] = check_visibility(changes.visibility)
        if changes.routing is not None:
            values["routing"] = values["routing_override"] = naming.check_routing(changes.routing)
        now = self._clock()
        async with self.write(scope) as repo:
            record = await naming.owned(repo, scope, without_spec(ref, "cap_rename"))
            if new_name is not None and new_name != record.display_name:
                if record.record_type == "mcp-server":
                    raise InvalidInput("MCP server records keep their mcp:<name> display name")
                await naming.apply_new_name(repo, scope, record, new_name, now)
            if values:
                await repo.update_record(
                    record.fqdn, updated_by=scope.user, updated_at=now, **values
                )
            if description := values.get("description"):  # what it is for: remembered
                await remember_now(repo.conn, record.fqdn, description, scope.user, now)
            updated = await repo.get(record.fqdn)
            assert updated is not None
        await self.announce(scope, updated.fqdn, "renamed")
        details = {"capability": updated.fqdn, "from": record.display_name}
        details |= {"to": updated.display_name, "changed": sorted(values)}
        self.audit("CAPABILITY_RENAMED", scope, details)
        return updated

    async def record_usage(self, fqdn: str, *, success: bool, latency_ms: float) -> None:
        """Count one run of a capability (usage, success, latency, last used)."""
        latency_ms = naming.check_latency(latency_ms)
        async with self._db.transaction() as conn:
            await SqlCapabilityRepository(conn).record_usage(
                fqdn, success=success, latency_ms=latency_ms, at=self._clock()
            )

    async def register_mcp_server(
        self,
        scope: Scope,
        name: str,
        *,
        code_url: str,
        routing: Routing = "local",
        visibility: Visibility = "project",
        description: str | None = None,
    ) -> CaptureResult:
        """Record an upstream server as ``mcp:<name>``; a changed command is a new version."""
        server = ServerRegistration(name, code_url, routing, visibility, description)
        async with self.write(scope) as repo:
            return await register_server(repo, scope, server, self._clock())

    # -- helpers -------------------------------------------------------------------------

    def plain_routing(self, tools: Sequence[str], explicit: Routing | None) -> Routing:
        """The routing of code using ``tools`` from the ``[routing]`` rules alone (the
        capabilities it calls are not looked up)."""
        return resolve_routing(
            tools, cloud_patterns=self.routing.cloud, local_patterns=self.routing.local,
            explicit=explicit,
        )  # fmt: skip

    async def announce(self, scope: Scope, fqdn: str, kind: str, *more: str) -> None:
        """Tell listeners here and elsewhere (one ``NOTIFY``) that ``scope``'s ``fqdn``s changed."""
        changes = [(scope.org, scope.project, name, kind) for name in (fqdn, *more)]
        await self._changes.announce_all(changes)

    def write(self, scope: Scope) -> AbstractAsyncContextManager[SqlCapabilityRepository]:
        """A write transaction holding ``scope``'s name lock."""
        return naming.scoped_write(self._db, scope)

    def now(self) -> datetime:
        """The registry's clock."""
        return self._clock()

    def audit(self, event: str, scope: Scope, details: dict[str, Any]) -> None:
        """Audit a change a person (or key) of ``scope`` made, when an auditor is attached."""
        if self.auditor is not None:
            decided_by = f"user:{scope.user}"
            self.auditor.emit(event, scope=scope, details=details, decided_by=decided_by)

    async def _create(
        self,
        scope: Scope,
        draft: CapabilityDraft,
        code_hash: str,
        name: str | None,
        latency_ms: float,
        now: datetime,
    ) -> CaptureResult | None:
        """The guarded one-statement creation (None: it did not apply, see ``capture``)."""
        quota, origin = self.capabilities_per_project, self.origin
        record = await creation.create_if_free(
            self._db, scope, draft, code_hash, name, latency_ms, now,
            rules=self.routing, quota=quota, origin=origin,
        )  # fmt: skip
        if record is None:
            return None
        kind = "named" if name is not None else UNNAMED_CAPTURE
        notified = self._db.dialect == "postgresql"  # the statement itself sent the NOTIFY
        await self._changes.announce(scope.org, scope.project, record.fqdn, kind, notified=notified)
        return CaptureResult(record=record, created=True)
