"""Upstream server entries: :class:`ServerSettings`, and how raw entries become them.

A server's ``${VAR}`` references are expanded from PML's environment when the config is
loaded (``environ`` given); the entry *as written* (references kept, paths resolved) is kept
beside it for output and records, so a secret reaches only the server it is meant for.

    servers = import_mcp_servers(Path(".mcp.json"))                 # as written, ${VAR} kept
    servers = import_mcp_servers(Path(".mcp.json"), environ=env)    # expanded, ready to start
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pml.config_text import format_validation_error, json_kind, read_config_file, show
from pml.config_travel import EXPANDED_FIELDS, EntryError, expand_entry, resolve_paths
from pml.errors import ConfigError

MAX_SERVER_NAME_LENGTH = 64
RESERVED_SERVER_NAME = "pml"  # mcp.pml.<tool> in snippets: PML's read-only registry tools
# What an unset ${VAR} stands for while an entry is only checked (never started): a URL,
# so that `url = "${BASE}/mcp"` passes the http(s) check.
UNSET_PLACEHOLDER = "https://unset.invalid"


def check_server_name(name: str) -> str:
    """``name`` if it can name a server (a ``ValueError`` saying why not)."""
    if not name:
        raise ValueError("server name must not be empty")
    if len(name) > MAX_SERVER_NAME_LENGTH:
        raise ValueError(
            f"server name is {len(name)} characters long (max {MAX_SERVER_NAME_LENGTH})"
        )
    # Control, format (bidi overrides), surrogate, private-use and unassigned characters
    # make names that print differently from what they are.
    if any(unicodedata.category(char).startswith("C") for char in name):
        raise ValueError("server name contains control or invisible characters")
    if name == RESERVED_SERVER_NAME:
        raise ValueError(
            "'pml' is reserved: snippets reach PML's own tools as mcp.pml.<tool>; "
            "give this server another name"
        )
    return name


ServerName = Annotated[str, AfterValidator(check_server_name)]


class ServerSettings(BaseModel):
    """One upstream MCP server: the fields of a Claude Desktop ``mcpServers`` entry."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list[str])
    env: dict[str, str] = Field(default_factory=dict[str, str])
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    type: Literal["stdio", "http", "streamable-http", "sse"] | None = None
    lazy: bool = False
    disabled: bool = False

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if self.command is None and self.url is None:
            raise ValueError("needs 'command' (a local process) or 'url' (a remote server)")
        if self.command is not None and self.url is not None:
            raise ValueError("sets both 'command' and 'url'; keep one")
        if self.type == "stdio" and self.command is None:
            raise ValueError("type 'stdio' needs 'command', not 'url'")
        if self.type not in (None, "stdio") and self.url is None:
            raise ValueError(f"type '{self.type}' needs 'url', not 'command'")
        return self


@dataclass(slots=True)
class ExpandedServers:
    """Raw server entries with ``${VAR}`` expanded, and the written text of what changed."""

    entries: object
    written: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    checked_only: set[str] = field(default_factory=set[str])  # expanded with placeholders

    def finish(
        self, servers: Mapping[str, ServerSettings]
    ) -> tuple[dict[str, ServerSettings], dict[str, ServerSettings]]:
        """The validated ``servers`` to run, and the written form of those that differ.

        A server only checked (disabled, or no environment given) runs as written: its
        placeholders never leave this function."""
        running = dict(servers)
        as_written: dict[str, ServerSettings] = {}
        for name, fields in self.written.items():
            written = running[name].model_copy(update=copy.deepcopy(fields))
            if name in self.checked_only:
                running[name] = written
            else:
                as_written[name] = written
        return running, as_written


def expand_servers(
    raw: object, environ: Mapping[str, str] | None, *, source: str
) -> ExpandedServers:
    """Expand every server entry of ``raw`` (the ``servers`` table or ``mcpServers``).

    Without ``environ`` (an import), or for a ``disabled`` server, references are only
    checked: an unset variable stands for a placeholder and is no error."""
    if not isinstance(raw, dict):
        return ExpandedServers(raw)
    entries: dict[object, object] = {}
    result = ExpandedServers(entries)
    for name, entry in cast(dict[object, object], raw).items():
        if not isinstance(entry, dict):
            entries[name] = entry
            continue
        written = cast(dict[str, Any], entry)
        check_only = environ is None or written.get("disabled") is True
        try:
            expanded = expand_entry(
                written, environ or {}, unset=UNSET_PLACEHOLDER if check_only else None
            )
        except EntryError as error:
            raise ConfigError(f"{source}: server {show(str(name))}: {error}") from None
        entries[name] = expanded
        changed = {
            key: written[key]
            for key in EXPANDED_FIELDS
            if key in written and expanded[key] != written[key]
        }
        if changed:
            result.written[str(name)] = changed
            if check_only:
                result.checked_only.add(str(name))
    return result


def import_mcp_servers(
    path: Path,
    *,
    warn: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
    resolve: bool = True,
) -> dict[str, ServerSettings]:
    """The ``mcpServers`` of a Claude Desktop / Claude Code / Cursor JSON config.

    Relative paths resolve against the file's folder (``resolve``); ``${VAR}`` expands from
    ``environ`` when given, else stays as written."""
    return read_mcp_servers(path, warn=warn, environ=environ, resolve=resolve)[0]


def read_mcp_servers(
    path: Path,
    *,
    warn: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
    resolve: bool = True,
) -> tuple[dict[str, ServerSettings], dict[str, ServerSettings]]:
    """:func:`import_mcp_servers`, and the written form of the servers expansion changed."""
    data = read_config_file(path, "JSON")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object, not {json_kind(data)}")
    raw = cast(dict[str, object], data).get("mcpServers")
    if raw is None:
        raise ConfigError(f'{path}: no "mcpServers" object found')
    if not isinstance(raw, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object, not {json_kind(raw)}')
    known: dict[str, dict[str, object]] = {}
    for name, entry in cast(dict[str, object], raw).items():
        try:
            check_server_name(name)
        except ValueError as error:
            raise ConfigError(f"{path}: server {show(name)}: {error}") from None
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{path}: server {show(name)} must be an object, not {json_kind(entry)}"
            )
        fields = cast(dict[str, object], entry)
        kept = {key: value for key, value in fields.items() if key in ServerSettings.model_fields}
        if warn is not None:
            for key in [key for key in fields if key not in kept]:
                warn(f"server {show(name)}: dropped unknown key {show(key)}")
        known[name] = resolve_paths(kept, path.parent) if resolve else kept
    expanded = expand_servers(known, environ, source=str(path))
    servers: dict[str, ServerSettings] = {}
    for name, entry in cast(dict[str, object], expanded.entries).items():
        try:
            servers[name] = ServerSettings.model_validate(entry)
        except ValidationError as error:
            raise ConfigError(
                f"{path}: server {show(name)}: {format_validation_error(error)}"
            ) from None
    return expanded.finish(servers)
