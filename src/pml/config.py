"""The settings of PML: ``pml.toml``, overridden by ``PML_`` environment variables.

Only entry points (the CLI, the server's ``main``) call :func:`load_settings`; they pass the
environment explicitly and hand the resulting :class:`Settings` down as an object, so core
code never reads the environment.

Example::

    >>> settings = load_settings(environ={"PML_SCOPE__ORG": "acme"}, cwd=Path("/nonexistent"))
    >>> (settings.scope.org, settings.scope.project, settings.sandbox.max_tool_calls)
    ('acme', 'default', 200)
"""

from __future__ import annotations

import getpass
import json
import logging
import re
import tomllib
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self, cast

from platformdirs import user_data_dir
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from pml.errors import ConfigError
from pml.sections import AuditSettings as AuditSettings
from pml.sections import CurationSettings as CurationSettings
from pml.sections import DiscoverySettings as DiscoverySettings
from pml.sections import IntentPolicySettings as IntentPolicySettings
from pml.sections import LlmSettings as LlmSettings
from pml.sections import PermissionCapabilityName as PermissionCapabilityName
from pml.sections import PermissionsSettings as PermissionsSettings
from pml.sections import PolicySettings as PolicySettings
from pml.sections import RoutingSettings as RoutingSettings
from pml.sections import SandboxSettings as SandboxSettings
from pml.sections import UpstreamSettings as UpstreamSettings
from pml.sections_agent import AgentSettings as AgentSettings
from pml.sections_agent import MemorySettings as MemorySettings
from pml.sections_ops import LogSettings as LogSettings
from pml.sections_ops import TelemetrySettings as TelemetrySettings

logger = logging.getLogger(__name__)

SCOPE_PART_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_SERVER_NAME_LENGTH = 64
_SHOWN_CHARS = 40
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def default_database_url() -> str:
    """The embedded default: an SQLite file ``pml.db`` in the user data directory."""
    return f"sqlite:///{Path(user_data_dir('pml')) / 'pml.db'}"


def audit_file_path(settings: Settings) -> Path | None:
    """The audit JSON-lines file: ``[audit] file``, else ``audit.jsonl`` beside an SQLite
    database; none for PostgreSQL unless configured (the table is the shared log)."""
    configured = settings.audit.file
    if configured is not None:
        return Path(configured).expanduser() if configured else None
    prefix = "sqlite:///"
    url = settings.database_url
    if url.startswith(prefix) and ":memory:" not in url:
        return Path(url[len(prefix) :].split("?", 1)[0]).expanduser().parent / "audit.jsonl"
    return None


RESERVED_SERVER_NAME = "pml"  # mcp.pml.<tool> in snippets: PML's read-only registry tools


def _check_server_name(name: str) -> str:
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


ServerName = Annotated[str, AfterValidator(_check_server_name)]


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


class ScopeSettings(BaseModel):
    """The org/project (and user) this install acts as."""

    model_config = ConfigDict(extra="forbid")

    org: str = Field(default="local", pattern=SCOPE_PART_PATTERN)
    project: str = Field(default="default", pattern=SCOPE_PART_PATTERN)
    user: str | None = Field(default=None, min_length=1)

    def effective_user(self) -> str:
        """The configured user, else the OS user (call at entry points only)."""
        if self.user is not None:
            return self.user
        try:
            return getpass.getuser()
        except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (bare containers)
            return "local"


class Settings(BaseSettings):
    """Everything PML is configured with; build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(env_prefix="PML_", env_nested_delimiter="__", extra="forbid")

    database_url: str = Field(default_factory=default_database_url, min_length=1)
    scope: ScopeSettings = Field(default_factory=ScopeSettings)
    servers: dict[ServerName, ServerSettings] = {}  # pydantic copies mutable defaults
    servers_file: Path | None = None
    expose_upstream: bool = False
    # tools/list page size: one page holds every tool of a usual install (cursors beyond).
    tools_page_size: int = Field(default=10_000, ge=1, le=100_000)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    llm: LlmSettings | None = None
    policy: PolicySettings = Field(default_factory=PolicySettings)
    permissions: PermissionsSettings = Field(default_factory=PermissionsSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    curation: CurationSettings = Field(default_factory=CurationSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    log: LogSettings = Field(default_factory=LogSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Never os.environ, .env files or secrets dirs: load_settings passes the environment.
        return (init_settings,)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' env parsing (prefix, ``__`` nesting, JSON) over a given mapping."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by _load_env_vars during super().__init__
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Settings is case-insensitive, like pydantic-settings' own env source.
        return {key.lower(): value for key, value in self._environ.items()}


def load_settings(
    config_path: Path | None = None,
    *,
    environ: Mapping[str, str],
    cwd: Path | None = None,
) -> Settings:
    """Settings from ``config_path`` / ``$PML_CONFIG`` / ``./pml.toml``, then ``environ``."""
    base = cwd if cwd is not None else Path.cwd()
    path = _find_config(config_path, environ, base)
    file_data = cast(dict[str, Any], _read(path, "TOML")) if path is not None else {}
    try:
        env_data = _MappingEnvSource(Settings, environ)()
    except SettingsError as error:
        detail = str(error).split(" from source")[0]  # drop our internal source class name
        raise ConfigError(f"environment: {detail} (PML_ lists and tables are JSON)") from None
    merged = _deep_merge(file_data, env_data)
    source = str(path) if path is not None else "settings"
    for key in merged:
        if key not in Settings.model_fields:
            raise ConfigError(f"{source}: {_show(key)}: unknown key")  # env keys are known
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as error:
        head = error.errors()[0]["loc"][0] if error.errors() else ""
        origin = "environment" if head in env_data else source
        raise ConfigError(f"{origin}: {format_validation_error(error)}") from None
    if settings.servers_file is None:
        return settings
    servers_file = (path.parent if path is not None else base) / settings.servers_file.expanduser()
    extra = import_mcp_servers(servers_file, warn=logger.warning)
    for name in extra:
        if name in settings.servers:
            raise ConfigError(
                f"server {_show(name)} is defined both in {source} and in {servers_file}"
            )
    return settings.model_copy(
        update={"servers": {**settings.servers, **extra}, "servers_file": servers_file}
    )


def import_mcp_servers(
    path: Path, *, warn: Callable[[str], None] | None = None
) -> dict[str, ServerSettings]:
    """The ``mcpServers`` of a Claude Desktop / Claude Code / Cursor JSON config."""
    data = _read(path, "JSON")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object, not {_json_kind(data)}")
    raw = cast(dict[str, object], data).get("mcpServers")
    if raw is None:
        raise ConfigError(f'{path}: no "mcpServers" object found')
    if not isinstance(raw, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object, not {_json_kind(raw)}')
    servers: dict[str, ServerSettings] = {}
    for name, entry in cast(dict[str, object], raw).items():
        try:
            _check_server_name(name)
        except ValueError as error:
            raise ConfigError(f"{path}: server {_show(name)}: {error}") from None
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{path}: server {_show(name)} must be an object, not {_json_kind(entry)}"
            )
        fields = cast(dict[str, object], entry)
        known = {key: value for key, value in fields.items() if key in ServerSettings.model_fields}
        if warn is not None:
            for key in [key for key in fields if key not in known]:
                warn(f"server {_show(name)}: dropped unknown key {_show(key)}")
        try:
            servers[name] = ServerSettings.model_validate(known)
        except ValidationError as error:
            raise ConfigError(
                f"{path}: server {_show(name)}: {format_validation_error(error)}"
            ) from None
    return servers


def format_validation_error(error: ValidationError, *, limit: int = 3) -> str:
    """One line naming each failing field path (``servers.time.command: ...``)."""
    parts: list[str] = []
    for detail in error.errors(include_url=False)[:limit]:
        where = _format_loc(detail["loc"])
        message = detail["msg"].removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden":
            message = "unknown key"
        parts.append(f"{where}: {message}" if where else message)
    hidden = error.error_count() - limit
    if hidden > 0:
        parts.append(f"and {hidden} more")
    return "; ".join(parts)


def _find_config(explicit: Path | None, environ: Mapping[str, str], base: Path) -> Path | None:
    if explicit is not None:
        path = base / explicit.expanduser()
        if not path.exists():
            raise ConfigError(f"config file not found: {path}")
        return path
    from_env = environ.get("PML_CONFIG")
    if from_env:
        path = base / Path(from_env).expanduser()
        if not path.exists():
            raise ConfigError(f"config file not found: {path} (from $PML_CONFIG)")
        return path
    path = base / "pml.toml"
    return path if path.exists() else None


def _read(path: Path, kind: Literal["TOML", "JSON"]) -> object:
    try:
        text = path.read_bytes().decode("utf-8-sig")  # editors on Windows may add a BOM
        return tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid {kind}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid {kind}: nested too deeply") from None
    except ValueError as error:  # TOMLDecodeError (with its line), or a too-long integer
        raise ConfigError(f"{path}: invalid {kind}: {error}") from None


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(cast(dict[str, Any], current), cast(dict[str, Any], value))
        else:
            merged[key] = value
    return merged


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":  # a dict key failed validation: the path already names it
            continue
        else:
            shown = part if _BARE_KEY.fullmatch(part) else _show(part)
            text += f".{shown}" if text else shown
    return text


def _show(text: str) -> str:
    """A name quoted for a one-line message: escaped, and cut when long."""
    cut = text[:_SHOWN_CHARS]
    escaped = "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in cut
    )
    if len(text) > _SHOWN_CHARS:
        return f'"{escaped}…" ({len(text)} characters)'
    return f'"{escaped}"'


def _json_kind(value: object) -> str:
    kinds = {"dict": "an object", "list": "an array", "str": "a string", "bool": "a boolean"}
    return "null" if value is None else kinds.get(type(value).__name__, "a number")
