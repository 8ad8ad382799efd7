"""The registry's values: capability records, versions, aliases and what resolution returns.

Records are immutable snapshots of rows; services build new ones rather than mutate::

    record.success_rate          # 0.0 when never used
    record.to_dict()             # the JSON shape of ``cap_whois`` (datetimes as ISO 8601)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pml.registry.routing import Routing
from pml.registry.scope import RecordType, Visibility


def empty_schema() -> dict[str, Any]:
    """The parameters schema of code that takes no arguments."""
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class CapabilityRecord:
    """One row of ``capability_records``: a capability or an MCP server."""

    fqdn: str
    id: str
    record_type: RecordType
    org: str
    project: str
    display_name: str
    named: bool
    namespace: str
    action: str
    tool_name: str
    hash: str
    code: str | None
    code_hash: str | None
    code_url: str | None
    intent: str | None
    description: str | None
    parameters_schema: dict[str, Any]
    tools_used: list[str]
    routing: Routing
    routing_override: Routing | None
    tags: list[str]
    visibility: Visibility
    version: int
    version_tag: str | None
    created_by: str
    created_at: datetime
    updated_by: str
    updated_at: datetime
    verified: bool
    signature: str | None
    usage_count: int
    success_count: int
    total_latency_ms: float
    last_used_at: datetime | None
    archived_at: datetime | None = None
    archived_by: str | None = None
    # The aliases an archived record held: names are freed, restoring brings back the free ones
    archived_aliases: list[dict[str, str]] | None = None
    deprecated_at: datetime | None = None
    deprecated_by: str | None = None
    deprecation_message: str | None = None
    replaced_by: str | None = None  # the FQDN of the capability to use instead
    # the last runs (``pml.registry.reliability``): a bit each, how many, their latency
    recent_outcomes: int = 0
    recent_runs: int = 0
    recent_latency_ms: float = 0.0

    @property
    def archived(self) -> bool:
        """Whether the record is archived (kept for history, out of every list and name)."""
        return self.archived_at is not None

    @property
    def deprecation(self) -> dict[str, str] | None:
        """``deprecated`` (the message) and ``replacedBy`` (an FQDN) for every answer about
        a deprecated record; ``None`` when it is not deprecated."""
        if self.deprecated_at is None:
            return None
        message = self.deprecation_message or f"Capability '{self.display_name}' is deprecated"
        fields = {"deprecated": message}
        if self.replaced_by is not None:
            fields["replacedBy"] = self.replaced_by
        return fields

    @property
    def success_rate(self) -> float:
        """Successful runs over all runs (0.0 before the first run)."""
        return self.success_count / self.usage_count if self.usage_count else 0.0

    @property
    def scope_key(self) -> str:
        """``org.project`` of the record."""
        return f"{self.org}.{self.project}"

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready values, plus ``success_rate`` and ``type``."""
        data = _jsonable(asdict(self))
        data["type"] = self.record_type
        data["success_rate"] = self.success_rate
        data["archived"] = self.archived
        return data


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One row of ``capability_versions`` (never modified once written)."""

    capability_fqdn: str
    version: int
    version_tag: str | None
    code: str | None
    code_hash: str | None
    code_url: str | None
    parameters_schema: dict[str, Any]
    tools_used: list[str]
    routing: Routing
    updated_by: str
    updated_at: datetime
    change_summary: str | None


@dataclass(frozen=True, slots=True)
class AliasRecord:
    """An old display name that still resolves to its capability."""

    alias: str
    target_fqdn: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a name resolved to: the record, the version asked for, and how it was found."""

    record: CapabilityRecord
    version: VersionRecord
    via_alias: str | None = None

    @property
    def deprecated_alias(self) -> dict[str, str] | None:
        """The warning to show when an old name (an alias) was used."""
        if self.via_alias is None:
            return None
        return {
            "alias": self.via_alias,
            "currentName": self.record.display_name,
            "message": (
                f'Deprecated: Using alias "{self.via_alias}" for capability '
                f'"{self.record.display_name}". Update your code.'
            ),
        }


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing and the total number of matches."""

    items: list[CapabilityRecord]
    total: int


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """The outcome of capturing a successful run: the record and whether it is new."""

    record: CapabilityRecord
    created: bool


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Filters, order and page of a capability listing (already validated)."""

    like_pattern: str | None = None
    named_only: bool = False
    unnamed_only: bool = False
    tags: tuple[str, ...] = ()
    created_by: str | None = None
    visibility: Visibility | None = None
    sort_by: str = "usage"
    descending: bool = True
    limit: int = 50
    offset: int = 0
    record_type: RecordType = "capability"
    archived: bool = False  # list the archived records instead of the active ones


@dataclass(frozen=True, slots=True)
class RoutingRules:
    """The ``[routing]`` server patterns (§8): cloud only where a cloud pattern names it."""

    cloud: tuple[str, ...] = ()
    local: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CapabilityDraft:
    """What a successful run tells the registry about the code it ran."""

    code: str
    intent: str | None = None
    tools_used: Sequence[str] = ()
    parameters_schema: dict[str, Any] = field(default_factory=empty_schema)
    description: str | None = None
    name: str | None = None
    visibility: Visibility = "project"
    tags: Sequence[str] = ()
    routing: Routing | None = None
    version_tag: str | None = None
    change_summary: str | None = None
    # The hash of the code as the agent wrote it, when ``code`` is a rewrite of it (literals
    # lifted into parameters): identity follows what was run. Default: the hash of ``code``.
    code_hash: str | None = None
    # True when ``code`` is PML's own rewrite of code its analysis parsed (``pml.execution.
    # capture``): the registry does not parse it again (~60 ms for 80 KB, on the event loop).
    code_parsed: bool = False


@dataclass(frozen=True, slots=True)
class RenameChanges:
    """The optional changes of ``cap_rename``; None leaves a field as it is."""

    new_name: str | None = None
    description: str | None = None
    tags: Sequence[str] | None = None
    visibility: Visibility | None = None
    routing: Routing | None = None


@dataclass(frozen=True, slots=True)
class Whois:
    """A record with its aliases and the number of its versions."""

    record: CapabilityRecord
    aliases: list[AliasRecord]
    version_count: int


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in data.items()
    }
