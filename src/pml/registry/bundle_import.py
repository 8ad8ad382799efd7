"""Bringing a capability bundle into the caller's org/project (``pml cap import``).

    report = await import_bundle(registry, scope, load_bundle(path), rules=rules)
    report.imported      # [{name, fqdn, from, versions}]
    report.skipped       # duplicates (with the existing name), name conflicts, secrets

The whole import is one write transaction holding the scope's name lock: it happens whole
or not at all, and ``dry_run`` computes the same report and rolls back. Each capability
gets a new FQDN in the target, generated the registry's way from its name and code hash;
the importing user creates it; its versions keep their numbers, code, tags, change
summaries and dates. A capability whose current code is already one of the target's is a
duplicate (skipped, the existing name reported); a name, alias or tool name already taken
is a conflict, skipped or (``on_conflict="rename"``) imported as ``name_2``, ``name_3``...
Code that calls another capability of the bundle (``mcp["<fqdn>"]``, and ``tools_used``) is
rewritten to the FQDN it has in the target; a reference neither in the bundle nor
resolvable in the target is kept and reported. Routing is derived from the target's
``[routing]`` unless the capability had an explicit override.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from pml.analysis.code_hash import parse_snippet
from pml.analysis.lifting import subscript_text
from pml.analysis.scan import MCP, scan_snippet
from pml.errors import NameTaken
from pml.registry import naming
from pml.registry.bundle_schema import Bundle, BundleCapability, all_refs, secret_line
from pml.registry.changes import UNNAMED_CAPTURE
from pml.registry.fqdn import is_fqdn
from pml.registry.models import CapabilityRecord, RoutingRules, VersionRecord
from pml.registry.names import split_display_name, tool_name_for
from pml.registry.records import blank_record
from pml.registry.routing import Routing, resolve_routing
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.lifecycle_repo import SqlLifecycleRepository

OnConflict = Literal["skip", "rename"]
ON_CONFLICT: tuple[OnConflict, ...] = ("skip", "rename")
MAX_SUFFIX = 100
_AUTO_PREFIX = "unnamed_"


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    dry_run: bool
    imported: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    renamed: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    skipped: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    unresolved: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    aliases_dropped: list[dict[str, str]] = field(default_factory=list[dict[str, str]])

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``pml cap import --json`` prints."""
        return {
            "dryRun": self.dry_run,
            "imported": self.imported,
            "renamed": self.renamed,
            "skipped": self.skipped,
            "unresolved": self.unresolved,
            "aliasesDropped": self.aliases_dropped,
        }


@dataclass(frozen=True, slots=True)
class _Placed:
    item: BundleCapability
    record: CapabilityRecord


class _RollBack(Exception):
    """Leaves the write transaction of a dry run without committing."""


def dependency_order(items: list[BundleCapability]) -> list[BundleCapability]:
    """Capabilities used by others first (bundle order otherwise; cycles end in bundle order)."""
    inside = {item.fqdn: item for item in items}
    uses = {item.fqdn: [ref for ref in all_refs(item) if ref in inside] for item in items}
    done: set[str] = set()
    ordered: list[BundleCapability] = []
    for item in items:
        stack: list[tuple[str, int]] = [(item.fqdn, 0)]
        path: set[str] = {item.fqdn}
        while stack:
            fqdn, index = stack.pop()
            if fqdn in done:
                path.discard(fqdn)
                continue
            refs = uses[fqdn]
            if index < len(refs):
                stack.append((fqdn, index + 1))
                ref = refs[index]
                if ref not in done and ref not in path:
                    path.add(ref)
                    stack.append((ref, 0))
                continue
            done.add(fqdn)
            path.discard(fqdn)
            ordered.append(inside[fqdn])
    return ordered


def rewrite_references(code: str, mapping: dict[str, str]) -> str:
    """``code`` with each ``mcp["<old fqdn>"]`` of ``mapping`` naming the new FQDN."""
    scan = scan_snippet(parse_snippet(code), code)
    quotes: dict[tuple[int, int], str | None] = {}
    edits: list[tuple[int, int, str]] = []
    for reference in scan.references:
        site = reference.site
        new = mapping.get(site.name) if not site.namespace else None
        if new is None or new == site.name:
            continue
        text = subscript_text(code, reference.place, MCP, new, quotes)
        if text is not None:  # inside ``f"{...=}"`` the old name stays (and is reported)
            edits.append((reference.place.start, reference.place.end, text))
    out: list[str] = []
    cursor = 0
    for start, end, text in sorted(edits):
        out.extend((code[cursor:start], text))
        cursor = end
    out.append(code[cursor:])
    return "".join(out)


def _alias_tool_name(alias: str, namespace: str) -> str:
    if alias.startswith(_AUTO_PREFIX):
        return tool_name_for(namespace, "exec_" + alias[len(_AUTO_PREFIX) :])
    return tool_name_for(*split_display_name(alias, namespace))


def _suffixed(name: str, number: int) -> str:
    suffix = f"_{number}"
    return name[: 64 - len(suffix)] + suffix


class _Importer:
    def __init__(
        self,
        repo: SqlCapabilityRepository,
        scope: Scope,
        rules: RoutingRules,
        on_conflict: OnConflict,
        report: ImportReport,
        now: datetime,
    ) -> None:
        self.repo, self.scope, self.rules = repo, scope, rules
        self.on_conflict, self.report, self.now = on_conflict, report, now
        self.mapping: dict[str, str] = {}
        self.placed: list[_Placed] = []

    async def duplicate_of(self, item: BundleCapability) -> CapabilityRecord | None:
        org, project = self.scope.org, self.scope.project
        for code_hash in dict.fromkeys([item.current.code_hash, item.source_code_hash]):
            if code_hash is not None:
                found = await self.repo.find_by_code_hash(org, project, code_hash)
                if found is not None:
                    return found
        return None

    async def free_name(self, item: BundleCapability) -> tuple[str, str, str] | None:
        """``(display_name, namespace, action)`` free in the target, or None (skipped)."""
        code_hash = item.current.code_hash
        if not item.named:
            try:
                return await naming.free_auto_name(self.repo, self.scope, item.namespace, code_hash)
            except NameTaken as error:
                self.skip(item, "name_taken", error.message)
                return None
        candidates = [item.display_name]
        if self.on_conflict == "rename":
            candidates += [_suffixed(item.display_name, n) for n in range(2, MAX_SUFFIX + 1)]
        for name in candidates:
            namespace, action = split_display_name(name, item.namespace)
            try:
                await naming.ensure_name_free(
                    self.repo, self.scope, name, tool_name_for(namespace, action)
                )
            except NameTaken:
                continue
            return name, namespace, action
        message = naming.taken_message(item.display_name, self.scope)
        self.skip(item, "name_taken", message)
        return None

    def skip(self, item: BundleCapability, reason: str, message: str, **more: str) -> None:
        entry = {"name": item.display_name, "fqdn": item.fqdn, "reason": reason}
        self.report.skipped.append(entry | {"message": message} | more)

    async def place(self, item: BundleCapability) -> None:
        """Give one capability its name and FQDN (a record row holding them)."""
        secret = next(
            ((v.version, line) for v in item.versions if (line := secret_line(v.code))), None
        )
        if secret is not None:
            message = f"version {secret[0]}, line {secret[1]} holds a credential-like literal"
            self.skip(item, "secret", message)
            return
        existing = await self.duplicate_of(item)
        if existing is not None:
            self.mapping[item.fqdn] = existing.fqdn
            message = f"the same code is capability '{existing.display_name}' here"
            self.skip(
                item,
                "duplicate",
                message,
                existing=existing.display_name,
                existingFqdn=existing.fqdn,
            )
            return
        named = await self.free_name(item)
        if named is None:
            return
        display_name, namespace, action = named
        code_hash = item.current.code_hash
        fqdn = await naming.free_fqdn(self.repo, self.scope, namespace, action, code_hash)
        current = item.current
        record = replace(
            blank_record(self.scope, fqdn, self.now),
            display_name=display_name,
            named=item.named,
            namespace=namespace,
            action=action,
            tool_name=tool_name_for(namespace, action),
            code=current.code,
            code_hash=code_hash,
            intent=item.intent,
            description=item.description,
            parameters_schema=current.parameters_schema,
            tools_used=list(current.tools_used),
            routing="local",  # until its final routing is derived below
            routing_override=item.routing_override,
            tags=list(item.tags),
            visibility=item.visibility,
            version=current.version,
            version_tag=current.version_tag,
        )
        await self.repo.insert_record(record)
        self.mapping[item.fqdn] = fqdn
        self.placed.append(_Placed(item, record))
        if item.named and display_name != item.display_name:
            entry = {"from": item.display_name, "name": display_name, "fqdn": fqdn}
            self.report.renamed.append(entry)

    async def routing_of(self, tools: list[str], explicit: Routing | None) -> Routing:
        known: dict[str, Routing] = {}
        for ref in tools:
            if is_fqdn(ref) or ref.startswith("mcp__"):
                found = await self.repo.resolve_name(self.scope, ref)
                if found is not None:
                    known[ref] = found[0].routing
        return resolve_routing(
            tools,
            cloud_patterns=self.rules.cloud,
            local_patterns=self.rules.local,
            explicit=explicit,
            capability_routing=known,
        )

    async def fill(self, placed: _Placed) -> None:
        """Write one placed capability's versions, tags, aliases and final code."""
        item, record = placed.item, placed.record
        lifecycle = SqlLifecycleRepository(self.repo.conn)
        final: VersionRecord | None = None
        for version in item.versions:
            code = rewrite_references(version.code, self.mapping)
            tools = [self.mapping.get(ref, ref) for ref in version.tools_used]
            final = VersionRecord(
                capability_fqdn=record.fqdn,
                version=version.version,
                version_tag=version.version_tag,
                code=code,
                code_hash=version.code_hash,
                code_url=None,
                parameters_schema=version.parameters_schema,
                tools_used=tools,
                routing=await self.routing_of(tools, item.routing_override),
                updated_by=self.scope.user,
                updated_at=version.updated_at,
                change_summary=version.change_summary,
            )
            await self.repo.insert_version(final)
            if version.version_tag is not None:
                await lifecycle.insert_version_tag(
                    record.fqdn,
                    version.version,
                    version.version_tag,
                    by=self.scope.user,
                    at=version.updated_at,
                )
        assert final is not None
        await self.repo.update_record(
            record.fqdn, code=final.code, tools_used=final.tools_used, routing=final.routing
        )
        await self.unresolved(item, record)
        for alias in item.aliases:
            tool_name = _alias_tool_name(alias, record.namespace)
            try:
                await naming.ensure_name_free(self.repo, self.scope, alias, tool_name)
            except NameTaken:
                self.report.aliases_dropped.append({"name": record.display_name, "alias": alias})
                continue
            await self.repo.insert_alias(
                self.scope.org, self.scope.project, alias, tool_name, record.fqdn, self.now
            )
        self.report.imported.append(
            {
                "name": record.display_name,
                "fqdn": record.fqdn,
                "from": item.fqdn,
                "versions": len(item.versions),
            }
        )

    async def unresolved(self, item: BundleCapability, record: CapabilityRecord) -> None:
        for ref in all_refs(item):
            target = self.mapping.get(ref, ref)
            if target != ref:
                continue
            if await self.repo.resolve_name(self.scope, ref) is None:
                entry = {"name": record.display_name, "fqdn": record.fqdn, "reference": ref}
                self.report.unresolved.append(entry)


async def import_bundle(
    registry: CapabilityRegistry,
    scope: Scope,
    bundle: Bundle,
    *,
    rules: RoutingRules,
    on_conflict: OnConflict = "skip",
    dry_run: bool = False,
) -> ImportReport:
    """Import a validated bundle into ``scope``'s org/project (see the module docstring)."""
    report = ImportReport(dry_run=dry_run)
    ordered = dependency_order(list(bundle.capabilities))
    placed: dict[str, _Placed] = {}
    try:
        async with registry.write(scope) as repo:
            importer = _Importer(repo, scope, rules, on_conflict, report, registry.now())
            for item in bundle.capabilities:  # names first: bundle order decides who gets one
                await importer.place(item)
            placed = {entry.item.fqdn: entry for entry in importer.placed}
            for item in ordered:  # then code, in dependency order (nested routing known)
                if item.fqdn in placed:
                    await importer.fill(placed[item.fqdn])
            if dry_run:
                raise _RollBack
    except _RollBack:
        return report
    for entry in placed.values():
        kind = "imported" if entry.record.named else UNNAMED_CAPTURE
        await registry.announce(scope, entry.record.fqdn, kind)
    details: dict[str, Any] = {
        "source": bundle.source.model_dump() if bundle.source is not None else None,
        "imported": [{"from": e["from"], "fqdn": e["fqdn"]} for e in report.imported],
        "skipped": [{"fqdn": e["fqdn"], "reason": e["reason"]} for e in report.skipped],
        "renamed": len(report.renamed),
        "unresolved": len(report.unresolved),
    }
    registry.audit("CAPABILITIES_IMPORTED", scope, details)
    return report
