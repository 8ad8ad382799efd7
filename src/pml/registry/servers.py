"""Upstream MCP servers as registry records (``mcp:<name>``, record type ``mcp-server``).

    server = ServerRegistration("time", "uvx mcp-server-time", routing="cloud")
    async with scoped_write(db, scope) as repo:
        result = await register_server(repo, scope, server, utc_now())

The record's FQDN is ``<org>.<project>.mcp.<name>.<hash>``; registering the same server again
changes nothing, a changed command is a new version (same FQDN), and changed metadata
(routing, visibility, description) is updated in place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime

from pml.errors import InvalidInput, NameTaken
from pml.registry import naming
from pml.registry.models import CaptureResult
from pml.registry.names import tool_name_for
from pml.registry.records import blank_record, version_of
from pml.registry.routing import Routing
from pml.registry.scope import Scope, Visibility, check_visibility
from pml.storage.capability_repo import SqlCapabilityRepository

MAX_CODE_URL = 4000


@dataclass(frozen=True, slots=True)
class ServerRegistration:
    """What the registry records about one upstream server."""

    name: str
    code_url: str
    routing: Routing = "local"
    visibility: Visibility = "project"
    description: str | None = None


async def register_server(
    repo: SqlCapabilityRepository, scope: Scope, server: ServerRegistration, now: datetime
) -> CaptureResult:
    """Create, update or leave alone the ``mcp:<name>`` record of ``server`` in ``scope``."""
    component = naming.server_component(server.name)
    code_url = _check_code_url(server.code_url)
    routing = naming.check_routing(server.routing)
    visibility = check_visibility(server.visibility)
    display_name = f"mcp:{component}"
    owner = await repo.name_owner(scope.org, scope.project, display_name)
    existing = await repo.get(owner) if owner else None
    if existing is not None and existing.record_type != "mcp-server":
        raise NameTaken(naming.taken_message(display_name, scope))
    if existing is not None:
        metadata = {
            key: value
            for key, value in (
                ("routing", routing),
                ("visibility", visibility),
                ("description", server.description),
            )
            if value is not None and getattr(existing, key) != value
        }
        if existing.code_url == code_url and not metadata:
            return CaptureResult(record=existing, created=False)
        updated = replace(existing, updated_by=scope.user, updated_at=now, **metadata)
        if existing.code_url != code_url:
            updated = replace(
                updated, code_url=code_url, version=existing.version + 1, version_tag=None
            )
            await repo.insert_version(version_of(updated, change_summary="command changed"))
        await repo.update_record(
            existing.fqdn,
            code_url=updated.code_url,
            version=updated.version,
            version_tag=updated.version_tag,
            updated_by=scope.user,
            updated_at=now,
            **metadata,
        )
        return CaptureResult(record=updated, created=False)
    digest = hashlib.sha256(f"{component}\0{code_url}".encode()).hexdigest()
    fqdn = await naming.free_fqdn(repo, scope, "mcp", component, digest)
    record = replace(
        blank_record(scope, fqdn, now),
        record_type="mcp-server",
        display_name=display_name,
        named=True,
        namespace="mcp",
        action=component,
        tool_name=tool_name_for("mcp", component),
        code_url=code_url,
        description=server.description,
        routing=routing,
        visibility=visibility,
        tags=["mcp-server"],
    )
    await repo.insert_record(record)
    await repo.insert_version(version_of(record, change_summary="registered"))
    return CaptureResult(record=record, created=True)


def _check_code_url(code_url: object) -> str:
    if not isinstance(code_url, str) or not code_url.strip():
        raise InvalidInput(
            "code_url must be a non-empty string (a command or a URL)", field="code_url"
        )
    if len(code_url) > MAX_CODE_URL:
        raise InvalidInput(
            f"code_url is too long (max: {MAX_CODE_URL} characters)", field="code_url"
        )
    return code_url
