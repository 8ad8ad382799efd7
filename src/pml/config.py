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
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from platformdirs import user_data_dir
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from pml.config_servers import MAX_SERVER_NAME_LENGTH as MAX_SERVER_NAME_LENGTH
from pml.config_servers import RESERVED_SERVER_NAME as RESERVED_SERVER_NAME
from pml.config_servers import ServerName, expand_servers, read_mcp_servers
from pml.config_servers import ServerSettings as ServerSettings
from pml.config_servers import import_mcp_servers as import_mcp_servers
from pml.config_text import format_validation_error as format_validation_error
from pml.config_text import read_config_file, show
from pml.config_travel import DEFAULT_PROJECT, derived_project, resolve_paths
from pml.errors import ConfigError
from pml.sections import AuditSettings as AuditSettings
from pml.sections import CurationSettings as CurationSettings
from pml.sections import DiscoverySettings as DiscoverySettings
from pml.sections import GatewaySettings as GatewaySettings
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
from pml.sections_limits import LimitsSettings as LimitsSettings
from pml.sections_ops import LogSettings as LogSettings
from pml.sections_ops import TelemetrySettings as TelemetrySettings

logger = logging.getLogger(__name__)

SCOPE_PART_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


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


class ScopeSettings(BaseModel):
    """The org/project (and user) this install acts as."""

    model_config = ConfigDict(extra="forbid")

    org: str = Field(default="local", pattern=SCOPE_PART_PATTERN)
    project: str = Field(default=DEFAULT_PROJECT, pattern=SCOPE_PART_PATTERN)
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
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
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
    # The servers whose written entry holds ${VAR}: as written, for output and records.
    _servers_as_written: dict[str, ServerSettings] = PrivateAttr(
        default_factory=dict[str, ServerSettings]
    )

    def server_as_written(self, name: str) -> ServerSettings:
        """Server ``name`` as its config writes it: ``${VAR}`` kept, paths resolved. Show and
        record this one; start the server from ``servers[name]`` (expanded)."""
        return self._servers_as_written.get(name) or self.servers[name]

    def keep_servers_as_written(self, servers: Mapping[str, ServerSettings]) -> None:
        """Remember the written form of servers whose entry ``${VAR}`` changed (the
        loader's step; see :meth:`server_as_written`)."""
        self._servers_as_written = dict(servers)

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
    """Settings from ``config_path`` / ``$PML_CONFIG`` / ``./pml.toml``, then ``environ``.

    Server entries travel (docs/configuration.md): relative paths resolve against the
    folder of the file naming them, ``${VAR}`` expands from ``environ``; a config file
    without ``[scope] project`` gets a project derived from its folder."""
    base = cwd if cwd is not None else Path.cwd()
    path = _find_config(config_path, environ, base)
    file_data = _file_data(path) if path is not None else {}
    try:
        env_data = _MappingEnvSource(Settings, environ)()
    except SettingsError as error:
        detail = str(error).split(" from source")[0]  # drop our internal source class name
        raise ConfigError(f"environment: {detail} (PML_ lists and tables are JSON)") from None
    merged = _deep_merge(file_data, env_data)
    source = str(path) if path is not None else "settings"
    for key in merged:
        if key not in Settings.model_fields:
            raise ConfigError(f"{source}: {show(key)}: unknown key")  # env keys are known
    expanded = expand_servers(merged.get("servers"), environ, source=source)
    if "servers" in merged:
        merged["servers"] = expanded.entries
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as error:
        head = error.errors()[0]["loc"][0] if error.errors() else ""
        origin = "environment" if head in env_data else source
        raise ConfigError(f"{origin}: {format_validation_error(error)}") from None
    servers, as_written = expanded.finish(settings.servers)
    update: dict[str, Any] = {"servers": servers}
    if path is not None and "project" not in settings.scope.model_fields_set:
        project = derived_project(path.parent)
        update["scope"] = settings.scope.model_copy(update={"project": project})
    if settings.servers_file is not None:
        servers_file = (path.parent if path is not None else base) / (
            settings.servers_file.expanduser()
        )
        extra, extra_written = read_mcp_servers(servers_file, warn=logger.warning, environ=environ)
        for name in extra:
            if name in servers:
                raise ConfigError(
                    f"server {show(name)} is defined both in {source} and in {servers_file}"
                )
        update |= {"servers": {**servers, **extra}, "servers_file": servers_file}
        as_written |= extra_written
    settings = settings.model_copy(update=update)
    settings.keep_servers_as_written(as_written)
    return settings


def _file_data(path: Path) -> dict[str, Any]:
    """The TOML of ``path``, its servers' relative paths resolved against its folder."""
    data = cast(dict[str, Any], read_config_file(path, "TOML"))
    servers = data.get("servers")
    if isinstance(servers, dict):
        data["servers"] = {
            name: resolve_paths(cast(dict[str, Any], entry), path.parent)
            if isinstance(entry, dict)
            else entry
            for name, entry in cast(dict[str, object], servers).items()
        }
    return data


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


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(cast(dict[str, Any], current), cast(dict[str, Any], value))
        else:
            merged[key] = value
    return merged
