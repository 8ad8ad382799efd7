"""Exporting a scope's capabilities as a bundle (``pml cap export``); see ``bundle_schema``
for the format and ``bundle_import`` for bringing one into another org/project.

    result = await export_capabilities(db, scope, pattern="fs:*")
    Path("caps.json").write_text(json_text(result.bundle))
    result.left_out        # capabilities whose code still holds a credential-like literal

A bundle holds the active capabilities of the caller's org/project that the caller can see
(never MCP server records, never archived ones): names, aliases, tags, intent, description,
visibility, the routing override, and every version with its code, tag, parameters schema,
tools used, change summary and date. Never usage counters, traces, creators or secrets: a
capability any of whose versions still holds a credential-like literal is left out and
reported, and its code is not written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pml.analysis.code_hash import normalized_code_hash
from pml.errors import InvalidInput, PmlError
from pml.registry.bundle_schema import (
    FORMAT,
    FORMAT_VERSION,
    MAX_CAPABILITIES,
    json_text,
    secret_line,
)
from pml.registry.models import AliasRecord, CapabilityRecord, ListQuery, VersionRecord
from pml.registry.patterns import glob_to_like
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.types import utc_now

__all__ = ["ExportResult", "export_capabilities", "json_text"]

PAGE = 500


@dataclass(frozen=True, slots=True)
class ExportResult:
    """The bundle (JSON-ready), what went into it and what was left out, and why."""

    bundle: dict[str, Any]
    exported: list[dict[str, Any]]
    left_out: list[dict[str, Any]]

    def report(self) -> dict[str, Any]:
        """The summary the CLI prints (never the code)."""
        return {"exported": self.exported, "leftOut": self.left_out}


async def _owned_records(
    repo: SqlCapabilityRepository, scope: Scope, pattern: str | None, named_only: bool
) -> list[CapabilityRecord]:
    like = glob_to_like(pattern) if pattern is not None else None
    found: list[CapabilityRecord] = []
    offset = 0
    while True:
        query = ListQuery(
            like_pattern=like,
            named_only=named_only,
            sort_by="name",
            descending=False,
            limit=PAGE,
            offset=offset,
        )
        page = await repo.list_visible(scope, query)
        found.extend(
            record
            for record in page.items
            if (record.org, record.project) == (scope.org, scope.project)
        )
        offset += PAGE
        if offset >= page.total or not page.items:
            return found


def _secret_in(versions: list[VersionRecord]) -> tuple[int, int] | None:
    """``(version, line)`` of the first credential-like literal, if any."""
    for version in versions:
        line = secret_line(version.code or "")
        if line is not None:
            return version.version, line
    return None


def _entry(
    record: CapabilityRecord, versions: list[VersionRecord], aliases: list[AliasRecord]
) -> dict[str, Any]:
    return {
        "fqdn": record.fqdn,
        "display_name": record.display_name,
        "named": record.named,
        "namespace": record.namespace,
        "source_code_hash": record.code_hash,
        "intent": record.intent,
        "description": record.description,
        "tags": list(record.tags),
        "visibility": record.visibility,
        "routing_override": record.routing_override,
        "aliases": [alias.alias for alias in aliases],
        "versions": [
            {
                "version": version.version,
                "version_tag": version.version_tag,
                "code": version.code,
                # of the code as written here, so that an importer can check it
                "code_hash": normalized_code_hash(version.code or ""),
                "parameters_schema": version.parameters_schema,
                "tools_used": list(version.tools_used),
                "change_summary": version.change_summary,
                "updated_at": version.updated_at.isoformat(),
            }
            for version in versions
        ],
    }


async def export_capabilities(
    db: Database, scope: Scope, *, pattern: str | None = None, named_only: bool = False
) -> ExportResult:
    """The bundle of ``scope``'s active capabilities whose display name matches ``pattern``."""
    entries: list[dict[str, Any]] = []
    exported: list[dict[str, Any]] = []
    left_out: list[dict[str, Any]] = []
    async with db.read() as conn:
        repo = SqlCapabilityRepository(conn)
        records = await _owned_records(repo, scope, pattern, named_only)
        if len(records) > MAX_CAPABILITIES:
            raise InvalidInput(
                f"{len(records)} capabilities match; a bundle holds at most "
                f"{MAX_CAPABILITIES}: narrow the export with a PATTERN",
                field="pattern",
            )
        for record in records:
            versions = await repo.versions_of(record.fqdn)
            left = {"name": record.display_name, "fqdn": record.fqdn}
            try:
                secret = _secret_in(versions)
            except PmlError as error:  # stored code that no longer parses: not portable
                left_out.append(left | {"reason": "invalid_code", "message": error.message})
                continue
            if secret is not None:
                message = f"version {secret[0]}, line {secret[1]} holds a credential-like literal"
                left_out.append(left | {"reason": "secret", "message": message})
                continue
            entries.append(_entry(record, versions, await repo.aliases_of(record.fqdn)))
            exported.append(left | {"versions": len(versions)})
    bundle: dict[str, Any] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported_at": utc_now().isoformat(),
        "source": {"org": scope.org, "project": scope.project},
        "capabilities": entries,
    }
    return ExportResult(bundle=bundle, exported=exported, left_out=left_out)
