"""Building a new capability's record: its names, FQDN, routing, and the project quota.

    record = await create_if_free(db, scope, draft, code_hash, name, latency_ms, now,
                                  rules=rules, quota=50_000, origin=origin)  # None: taken
    record = await free_record(repo, scope, draft, code_hash, name, routing, now)  # careful

The guarded path (``pml.storage.capability_writes``) tries the first names a capability
would get — the shortest auto name and FQDN, or the given name — in one statement, and the
careful path (``CapabilityRegistry.capture`` under the scope's lock) looks for longer ones
only when those are taken. Both build the record here, so both store the same thing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime

from pml.registry import naming
from pml.registry.changes import CHANGES_CHANNEL, UNNAMED_CAPTURE, CapabilityChange
from pml.registry.fqdn import fqdn_candidates, is_fqdn
from pml.registry.models import CapabilityDraft, CapabilityRecord, RoutingRules
from pml.registry.names import namespace_from_tools, split_display_name, tool_name_for
from pml.registry.records import blank_record, check_version_tag, version_of
from pml.registry.routing import Routing, resolve_routing
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository, resolve_reference
from pml.storage.capability_writes import NewCapability, insert_if_free
from pml.storage.database import Database
from pml.storage.fresh_stats import table_grew

# The routing of a capability a snippet calls (by FQDN or tool name), None if unknown.
RoutingLookup = Callable[[str], Awaitable[Routing | None]]


async def routing_of(
    rules: RoutingRules, tools: Sequence[str], explicit: Routing | None, lookup: RoutingLookup
) -> Routing:
    """SPEC §8: a capability's routing from what it uses (capabilities it calls included)."""
    capability_routing: dict[str, Routing] = {}
    for ref in tools:
        if is_fqdn(ref) or ref.startswith("mcp__"):
            found = await lookup(ref)
            if found is not None:
                capability_routing[ref] = found
    return resolve_routing(
        tools,
        cloud_patterns=rules.cloud,
        local_patterns=rules.local,
        explicit=explicit,
        capability_routing=capability_routing,
    )


def build_record(
    scope: Scope,
    draft: CapabilityDraft,
    code_hash: str,
    *,
    fqdn: str,
    display_name: str,
    named: bool,
    namespace: str,
    action: str,
    routing: Routing,
    now: datetime,
) -> CapabilityRecord:
    """A new record holding ``draft`` under the given names (usage not counted yet)."""
    return replace(
        blank_record(scope, fqdn, now),
        display_name=display_name,
        named=named,
        namespace=namespace,
        action=action,
        tool_name=tool_name_for(namespace, action),
        code=draft.code,
        code_hash=code_hash,
        intent=draft.intent,
        description=draft.description,
        parameters_schema=draft.parameters_schema,
        tools_used=list(draft.tools_used),
        routing=routing,
        routing_override=draft.routing,
        version_tag=check_version_tag(draft.version_tag),
    )


def first_choice(
    scope: Scope,
    draft: CapabilityDraft,
    code_hash: str,
    name: str | None,
    routing: Routing,
    now: datetime,
) -> CapabilityRecord:
    """The record with the names a new capability gets when nothing collides."""
    base = namespace_from_tools(list(draft.tools_used))
    if name is not None:
        namespace, action = split_display_name(name, base)
        display_name = name
    else:
        prefix = code_hash[:8]
        namespace, display_name, action = base, f"unnamed_{prefix}", f"exec_{prefix}"
    fqdn = str(next(iter(fqdn_candidates(scope.org, scope.project, namespace, action, code_hash))))
    return build_record(
        scope,
        draft,
        code_hash,
        fqdn=fqdn,
        display_name=display_name,
        named=name is not None,
        namespace=namespace,
        action=action,
        routing=routing,
        now=now,
    )


async def free_record(
    repo: SqlCapabilityRepository,
    scope: Scope,
    draft: CapabilityDraft,
    code_hash: str,
    name: str | None,
    routing: Routing,
    now: datetime,
) -> CapabilityRecord:
    """The record with the first free names (inside the scope's write transaction):
    ``NAME_TAKEN`` for a given name in use, longer auto names and FQDN hashes otherwise."""
    base = namespace_from_tools(list(draft.tools_used))
    if name is not None:
        namespace, action = split_display_name(name, base)
        display_name = name
        await naming.ensure_name_free(repo, scope, name, tool_name_for(namespace, action))
    else:
        display_name, namespace, action = await naming.free_auto_name(repo, scope, base, code_hash)
    fqdn = await naming.free_fqdn(repo, scope, namespace, action, code_hash)
    return build_record(
        scope,
        draft,
        code_hash,
        fqdn=fqdn,
        display_name=display_name,
        named=name is not None,
        namespace=namespace,
        action=action,
        routing=routing,
        now=now,
    )


async def create_if_free(
    db: Database,
    scope: Scope,
    draft: CapabilityDraft,
    code_hash: str,
    name: str | None,
    latency_ms: float,
    now: datetime,
    *,
    rules: RoutingRules,
    quota: int,
    origin: str,
) -> CapabilityRecord | None:
    """The new record under its first names, written by one guarded statement (with its
    version, tags and, on PostgreSQL, the change's ``NOTIFY``); None: nothing was written."""
    routing = await routing_of(rules, draft.tools_used, draft.routing, lookup_outside(db, scope))
    record = first_use(
        first_choice(scope, draft, code_hash, name, routing, now), draft, latency_ms, now
    )
    kind = "named" if name is not None else UNNAMED_CAPTURE
    change = CapabilityChange(scope.org, scope.project, record.fqdn, kind, origin)
    new = NewCapability(
        record,
        version_of(record, change_summary=draft.change_summary or "created"),
        quota=quota,
        notify=(CHANGES_CHANNEL, change.to_payload()),
    )
    if not await insert_if_free(db, new):
        return None
    await table_grew(db)  # PostgreSQL's statistics, kept fresh through a burst
    return record


def first_use(
    record: CapabilityRecord, draft: CapabilityDraft, latency_ms: float, now: datetime
) -> CapabilityRecord:
    """A new record as its first run leaves it: tags, visibility and one use counted."""
    return replace(
        record,
        tags=list(draft.tags),
        visibility=draft.visibility,
        usage_count=1,
        success_count=1,
        total_latency_ms=latency_ms,
        last_used_at=now,
        recent_outcomes=1,
        recent_runs=1,
        recent_latency_ms=latency_ms,
    )


def lookup_in(repo: SqlCapabilityRepository, scope: Scope) -> RoutingLookup:
    """Capability routing read inside ``repo``'s transaction."""

    async def lookup(ref: str) -> Routing | None:
        found = await repo.resolve_name(scope, ref)
        return found[0].routing if found is not None else None

    return lookup


def lookup_outside(db: Database, scope: Scope) -> RoutingLookup:
    """Capability routing read by point queries outside any transaction."""

    async def lookup(ref: str) -> Routing | None:
        found = await resolve_reference(db, scope, ref)
        return found[0].routing if found is not None else None

    return lookup
