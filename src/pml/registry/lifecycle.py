"""The life of a capability after it is learned: archive, restore, purge, deprecate, tag.

    lifecycle = CapabilityLifecycle(registry)
    await lifecycle.archive(scope, "fs:read_json")                 # DEPENDANTS listed, or done
    await lifecycle.restore(scope, "fs:read_json", new_name=None)  # NAME_TAKEN asks for a name
    await lifecycle.deprecate(scope, "old", replaced_by="new", message="use new")
    await lifecycle.tag(scope, "fs:read_json@v2", "v1.2.0")

- **Archive** keeps the FQDN, versions, traces and audit, and takes the record out of
  lists, tool lists, discovery and name resolution; its display name and aliases are freed
  (the aliases wait on the record). A capability that active ones use is archived only
  with ``force``, and the refusal names them.
- **Restore** brings the record back under its name, or under ``new_name`` when another
  capability took it meanwhile; the aliases still free come back, the others are reported.
  A project at its quota (``[limits] capabilities_per_project``) gets ``LIMIT_EXCEEDED``
  and nothing changes: archive-create-restore must not grow a project past its quota.
  A capability whose code was learned again meanwhile cannot come back (the code is
  already that other capability).
- **Purge** deletes every row of an archived capability (the database refuses to delete the
  history of an active one).
- **Deprecate** marks a record: every answer about it carries ``deprecated`` and
  ``replacedBy``; discovery ranks it below its replacement; its tool description says so.
- **Tag** gives one version a semantic tag, unique per capability and immutable.

Each change is one transaction, announced (tool lists, discovery, other replicas) and
audited with the person or key that made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pml.errors import InvalidInput, LimitExceeded, NameTaken, NotFound, VersionNotFound
from pml.registry import naming
from pml.registry.fqdn import message_value
from pml.registry.models import CapabilityRecord, VersionRecord
from pml.registry.names import split_display_name, tool_name_for, validate_name
from pml.registry.records import check_ref, check_version_tag
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.versions import parse_version_spec, select_version, split_name_and_spec
from pml.storage.capability_writes import count_capabilities
from pml.storage.lifecycle_repo import SqlLifecycleRepository
from pml.storage.version_reads import version_at, version_heads

MAX_MESSAGE = 1_000


@dataclass(frozen=True, slots=True)
class Restored:
    """A restored record and the old aliases that could not come back (taken meanwhile)."""

    record: CapabilityRecord
    aliases_dropped: list[str]


class CapabilityLifecycle:
    """Archive, restore, purge, deprecate and tag capabilities of the caller's scope."""

    def __init__(self, registry: CapabilityRegistry) -> None:
        self._registry = registry

    async def archive(
        self, scope: Scope, ref: object, *, force: bool = False
    ) -> tuple[CapabilityRecord, list[CapabilityRecord]]:
        """Archive the capability ``ref`` names; returns it and the dependants it had that
        ``scope`` may see (a refusal names only those, and counts the others)."""
        now = self._registry.now()
        async with self._registry.write(scope) as repo:
            record = await naming.owned(repo, scope, _plain(ref, "archive"))
            _capability_only(record, "archived")
            lifecycle = SqlLifecycleRepository(repo.conn)
            dependants, hidden = await lifecycle.dependants(record.fqdn, scope)
            if (dependants or hidden) and not force:
                raise InvalidInput(
                    _dependants_message(record, dependants, hidden),
                    field="force",
                    dependants=[_brief(item) for item in dependants],
                    hiddenDependants=hidden,
                )
            held = await lifecycle.take_aliases(record.fqdn)
            await lifecycle.archive(record.fqdn, by=scope.user, at=now, held=held)
            archived = await repo.get(record.fqdn)
            assert archived is not None
        await self._registry.announce(scope, record.fqdn, "archived")
        details: dict[str, Any] = {"capability": record.fqdn, "name": record.display_name}
        details |= {"forced": force, "dependants": [item.fqdn for item in dependants]}
        self._registry.audit("CAPABILITY_ARCHIVED", scope, details)
        return archived, dependants

    async def restore(self, scope: Scope, ref: object, *, new_name: object = None) -> Restored:
        """Bring an archived capability back (under ``new_name`` if its name was taken)."""
        name = validate_name(new_name) if new_name is not None else None
        now = self._registry.now()
        async with self._registry.write(scope) as repo:
            lifecycle = SqlLifecycleRepository(repo.conn)
            record = await lifecycle.archived_named(scope, _plain(ref, "restore"))
            if record is None:
                raise NotFound(f"No archived capability: {message_value(ref)}")
            if record.code_hash is not None:
                other = await repo.find_by_code_hash(scope.org, scope.project, record.code_hash)
                if other is not None:
                    raise InvalidInput(
                        f"This code was learned again as capability '{other.display_name}' "
                        f"({other.fqdn}); archive that one first or keep using it",
                    )
            target = name or record.display_name
            namespace, action = split_display_name(target, record.namespace)
            tool_name = tool_name_for(namespace, action)
            try:
                await naming.ensure_name_free(repo, scope, target, tool_name)
            except NameTaken:
                if name is not None:
                    raise
                raise NameTaken(
                    f"{naming.taken_message(target, scope)}: restore it under a new name "
                    "(--name NEW)"
                ) from None
            renamed = {"namespace": namespace, "action": action, "tool_name": tool_name}
            await lifecycle.unarchive(
                record.fqdn, display_name=target, updated_by=scope.user, updated_at=now, **renamed
            )
            await _within_quota(repo, scope, self._registry.capabilities_per_project, target)
            dropped = await _restore_aliases(repo, scope, record, now)
            restored = await repo.get(record.fqdn)
            assert restored is not None
        await self._registry.announce(scope, record.fqdn, "restored")
        details = {"capability": record.fqdn, "name": target, "aliasesDropped": dropped}
        self._registry.audit("CAPABILITY_RESTORED", scope, details)
        return Restored(restored, dropped)

    async def archived(self, scope: Scope, ref: object) -> CapabilityRecord:
        """The archived capability of ``scope`` that ``ref`` names (the name it had, FQDN,
        id), or ``NOT_FOUND`` saying that only an archived one can be purged."""
        async with self._registry.write(scope) as repo:
            return await _archived(SqlLifecycleRepository(repo.conn), scope, ref)

    async def purge(self, scope: Scope, ref: object) -> CapabilityRecord:
        """Delete every row of an archived capability; returns what it was."""
        async with self._registry.write(scope) as repo:
            lifecycle = SqlLifecycleRepository(repo.conn)
            record = await _archived(lifecycle, scope, ref)
            await lifecycle.purge(record.fqdn)
        await self._registry.announce(scope, record.fqdn, "purged")
        details = {"capability": record.fqdn, "name": record.display_name}
        self._registry.audit("CAPABILITY_PURGED", scope, details)
        return record

    async def deprecate(
        self,
        scope: Scope,
        ref: object,
        *,
        replaced_by: object = None,
        message: object = None,
        undo: bool = False,
    ) -> CapabilityRecord:
        """Mark a capability deprecated (or no longer, with ``undo``)."""
        text = _message(message)
        now = self._registry.now()
        async with self._registry.write(scope) as repo:
            record = await naming.owned(repo, scope, _plain(ref, "deprecate"))
            _capability_only(record, "deprecated")
            replacement: CapabilityRecord | None = None
            if replaced_by is not None and not undo:
                found = await repo.resolve_name(scope, _plain(replaced_by, "replaced_by"))
                if found is None or found[0].record_type != "capability":
                    raise NotFound(f"Capability not found: {message_value(replaced_by)}")
                replacement = found[0]
                if replacement.fqdn == record.fqdn:
                    raise InvalidInput("A capability cannot replace itself", field="replaced_by")
            if text is None and not undo:
                text = f"Capability '{record.display_name}' is deprecated"
                if replacement is not None:
                    text += f": use '{replacement.display_name}' ({replacement.fqdn}) instead"
            values = {
                "deprecated_at": None if undo else now,
                "deprecated_by": None if undo else scope.user,
                "deprecation_message": None if undo else text,
                "replaced_by": replacement.fqdn if replacement is not None else None,
            }
            await repo.update_record(record.fqdn, updated_at=now, **values)
            updated = await repo.get(record.fqdn)
            assert updated is not None
        await self._registry.announce(scope, record.fqdn, "deprecated")
        details: dict[str, Any] = {"capability": record.fqdn, "name": record.display_name}
        details |= {"undone": undo, "replacedBy": values["replaced_by"]}
        self._registry.audit("CAPABILITY_DEPRECATED", scope, details)
        return updated

    async def tag(self, scope: Scope, ref: object, tag: object) -> VersionRecord:
        """Give the version ``ref`` names (``name``: the current one, ``name@v3``: version 3,
        or any other specifier) the semantic tag ``tag``."""
        normalised = check_version_tag(tag)
        if normalised is None:
            raise InvalidInput("A version tag is required, e.g. v1.2.0", field="tag")
        name, spec = split_name_and_spec(check_ref(ref))
        now = self._registry.now()
        async with self._registry.write(scope) as repo:
            record = await naming.owned(repo, scope, name)
            versions = await version_heads(repo.conn, record.fqdn)  # no version's code
            parsed = parse_version_spec(spec, name)
            if parsed.kind == "major":  # here @vN designates version N itself
                numbered = [item for item in versions if item.version == parsed.major]
                if not numbered:
                    raise VersionNotFound(f"Version {parsed.raw} not found for {name}")
                version = numbered[0]
            else:
                version = select_version(versions, parsed, name)
            lifecycle = SqlLifecycleRepository(repo.conn)
            if version.version_tag is not None:
                raise InvalidInput(
                    f"Version {version.version} of {record.display_name} is already tagged "
                    f"{version.version_tag}; tags are immutable",
                    field="tag",
                )
            holder = await lifecycle.tag_owner(record.fqdn, normalised)
            if holder is not None:
                raise InvalidInput(
                    f"Version tag {normalised} already exists for {record.display_name} "
                    f"(version {holder}); tags are immutable",
                    field="tag",
                )
            await lifecycle.insert_version_tag(
                record.fqdn, version.version, normalised, by=scope.user, at=now
            )
            if version.version == record.version:
                await repo.update_record(record.fqdn, version_tag=normalised)
            tagged = await version_at(repo.conn, record.fqdn, version.version)
        await self._registry.announce(scope, record.fqdn, "tagged")
        details = {"capability": record.fqdn, "version": version.version, "tag": normalised}
        self._registry.audit("CAPABILITY_TAGGED", scope, details)
        return tagged


async def _within_quota(
    repo: naming.SqlCapabilityRepository, scope: Scope, quota: int, name: str
) -> None:
    """``LIMIT_EXCEEDED`` (the transaction then rolls back) when the restore just written
    took the project over its quota.

    Checked after the write, in its transaction: the trigger that counted the restored
    capability holds the project's ``capability_counts`` row until commit and counted on
    top of every committed change, so concurrent restores and captures cannot both pass.
    """
    if quota <= 0:
        return
    held = await count_capabilities(repo.conn, scope.org, scope.project)
    if held > quota:
        raise LimitExceeded(
            f"Project {scope.key} already holds {held - 1} capabilities, its limit is {quota} "
            f"(limits.capabilities_per_project): capability '{name}' was not restored; "
            "archive or purge another capability first",
            limit="capabilities_per_project",
            max=quota,
        )


async def _restore_aliases(
    repo: naming.SqlCapabilityRepository, scope: Scope, record: CapabilityRecord, now: datetime
) -> list[str]:
    """Put back the held aliases that are still free; the names of the others."""
    dropped: list[str] = []
    for held in record.archived_aliases or []:
        alias, tool_name = held.get("alias", ""), held.get("tool_name", "")
        try:
            await naming.ensure_name_free(repo, scope, alias, tool_name)
        except NameTaken:
            dropped.append(alias)
            continue
        await repo.insert_alias(scope.org, scope.project, alias, tool_name, record.fqdn, now)
    return dropped


async def _archived(
    lifecycle: SqlLifecycleRepository, scope: Scope, ref: object
) -> CapabilityRecord:
    record = await lifecycle.archived_named(scope, _plain(ref, "purge"))
    if record is None:
        raise NotFound(
            f"No archived capability: {message_value(ref)} "
            "(only an archived capability can be purged: archive it first)"
        )
    return record


def _plain(ref: object, what: str) -> str:
    """A reference without a version specifier (a lifecycle change is about the record)."""
    text = check_ref(ref)
    if "@" in text:
        raise InvalidInput(f"{what} takes a capability name without @version", field="name")
    return text


def _capability_only(record: CapabilityRecord, done: str) -> None:
    if record.record_type != "capability":
        raise InvalidInput(
            f"'{record.display_name}' is an MCP server record: it follows the configuration "
            f"and cannot be {done}"
        )


def _message(message: object) -> str | None:
    if message is None:
        return None
    if (
        not isinstance(message, str)
        or len(message) > MAX_MESSAGE
        or any(ord(char) < 32 and char not in "\n\t" for char in message)
    ):
        raise InvalidInput(
            f"message must be text of at most {MAX_MESSAGE} characters without control characters",
            field="message",
        )
    return message.strip() or None


def _brief(record: CapabilityRecord) -> dict[str, str]:
    return {"fqdn": record.fqdn, "display_name": record.display_name}


def _dependants_message(
    record: CapabilityRecord, shown: list[CapabilityRecord], hidden: int
) -> str:
    """Why an archive was refused, naming only the dependants the caller may see."""
    count = len(shown) + hidden
    names = ", ".join(f"{item.display_name} ({item.fqdn})" for item in shown)
    others = f"{hidden} you cannot see" if hidden else ""
    listed = "; ".join(part for part in (names, others) if part)
    return (
        f"Capability '{record.display_name}' is used by {count} other "
        f"capabilit{'y' if count == 1 else 'ies'}: {listed}. "
        "Archive anyway with force (they will fail until changed)."
    )
