"""Building capability and version records, and checking the references that name them.

record = blank_record(scope, "local.default.fs.exec_a7f3b2c1.a7f3", now)
version = version_of(record, change_summary="created")
"""

from __future__ import annotations

import difflib
import uuid
from datetime import datetime
from typing import Any

from pml.errors import InvalidInput
from pml.registry.fqdn import Fqdn
from pml.registry.models import CapabilityRecord, VersionRecord, empty_schema
from pml.registry.names import tool_name_for
from pml.registry.scope import Scope
from pml.registry.versions import normalise_tag, split_name_and_spec

EMPTY_SCHEMA: dict[str, Any] = empty_schema()


def check_ref(ref: object) -> str:
    """A capability reference as a non-empty string, or ``INVALID_INPUT``."""
    if not isinstance(ref, str):
        raise InvalidInput(f"name must be a string, not {type(ref).__name__}", field="name")
    if not ref.strip():
        raise InvalidInput("name must not be empty", field="name")
    if "\x00" in ref:  # no name holds one, and PostgreSQL refuses it in text
        raise InvalidInput("name must not contain a NUL character", field="name")
    return ref


def without_spec(ref: object, operation: str) -> str:
    """A reference that must not carry a ``@version`` (writes act on the latest version)."""
    name, spec = split_name_and_spec(check_ref(ref))
    if spec is not None:
        raise InvalidInput(
            f"{operation} takes a capability name without a version: {name!r}", field="name"
        )
    return name


def check_version_tag(tag: object) -> str | None:
    """A semantic version tag normalised to ``vX.Y.Z``, or ``INVALID_INPUT``."""
    if tag is None:
        return None
    normalised = normalise_tag(tag) if isinstance(tag, str) else None
    if normalised is None:
        raise InvalidInput(
            f"Invalid version tag: {tag!r}. Use vMAJOR.MINOR.PATCH, e.g. v1.2.0",
            field="version_tag",
        )
    return normalised


def blank_record(scope: Scope, fqdn: str, now: datetime) -> CapabilityRecord:
    """A record for ``fqdn`` owned by ``scope`` with every optional field empty."""
    parts = Fqdn.parse(fqdn)
    return CapabilityRecord(
        fqdn=fqdn,
        id=str(uuid.uuid4()),
        record_type="capability",
        org=scope.org,
        project=scope.project,
        display_name=parts.action,
        named=False,
        namespace=parts.namespace,
        action=parts.action,
        tool_name=tool_name_for(parts.namespace, parts.action),
        hash=parts.hash,
        code=None,
        code_hash=None,
        code_url=None,
        intent=None,
        description=None,
        parameters_schema=dict(EMPTY_SCHEMA),
        tools_used=[],
        routing="cloud",
        routing_override=None,
        tags=[],
        visibility="project",
        version=1,
        version_tag=None,
        created_by=scope.user,
        created_at=now,
        updated_by=scope.user,
        updated_at=now,
        verified=False,
        signature=None,
        usage_count=0,
        success_count=0,
        total_latency_ms=0.0,
        last_used_at=None,
    )


def version_of(record: CapabilityRecord, *, change_summary: str | None) -> VersionRecord:
    """The version row describing a record's current code."""
    return VersionRecord(
        capability_fqdn=record.fqdn,
        version=record.version,
        version_tag=record.version_tag,
        code=record.code,
        code_hash=record.code_hash,
        code_url=record.code_url,
        parameters_schema=record.parameters_schema,
        tools_used=record.tools_used,
        routing=record.routing,
        updated_by=record.updated_by,
        updated_at=record.updated_at,
        change_summary=change_summary,
    )


def current_version(record: CapabilityRecord) -> VersionRecord:
    """The latest version, read from the record itself (no second query on the hot path)."""
    return version_of(record, change_summary=None)


def summarise_change(old: str, new: str) -> str:
    """``+A -R lines`` between two versions of code."""
    # Line blocks only, as ``unified_diff`` compares: ``difflib.ndiff`` also pairs similar
    # lines character by character, and two 90 KB versions took it minutes of the event
    # loop, inside the write transaction (every tenant waited).
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines())
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag != "equal":
            removed += old_end - old_start
            added += new_end - new_start
    return f"code changed: +{added} -{removed} lines"
