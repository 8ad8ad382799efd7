"""``pml init``: write a starter ``pml.toml``, optionally importing ``mcpServers``.

The servers come from a Claude Desktop, Claude Code (``.mcp.json``, ``~/.claude.json``) or
Cursor (``.cursor/mcp.json``) JSON config; keys PML does not know (``autoApprove``, ...) are
dropped with a warning. ``${VAR}`` references are written as they are (never their values),
and relative paths are rewritten when the new file is in another folder than the JSON one.
The ``[scope] project`` written is derived from the new file's folder, so that two projects
initialised on one machine do not share capabilities. Nothing is written unless the whole
import succeeds.

Example::

    $ pml init --from ~/.cursor/mcp.json
    wrote pml.toml: 2 servers imported from /home/me/.cursor/mcp.json
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pml.cli.common import ConfigOption, config_path, run_command
from pml.errors import ConfigError

if TYPE_CHECKING:
    from pml.config import ServerSettings

FromOption = Annotated[
    Path | None,
    typer.Option(
        "--from",
        help="Import mcpServers from a Claude Desktop / Claude Code / Cursor JSON config.",
        show_default=False,
    ),
]
ForceOption = Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")]

_HEADER = """\
# pml.toml: the configuration of PML, the Procedural Memory Layer.
# Environment variables override this file: PML_<KEY> and PML_<SECTION>__<KEY>,
# e.g. PML_DATABASE_URL or PML_SCOPE__ORG.

# Where capabilities, usage and the audit log live. The default is an SQLite file:
"""

_MIDDLE = """\

# A shared deployment uses PostgreSQL:
# database_url = "postgresql://pml:secret@db.example.com/pml"

# More servers from a JSON file in Claude Desktop format ({"mcpServers": {...}}):
# servers_file = "claude_desktop_config.json"

# Also expose upstream tools as <server>__<tool> (capabilities are always exposed):
# expose_upstream = false

"""

_SCOPE = """\
# Who this install acts as. Configs that name the same database_url and [scope] share
# capabilities; without `project`, it is derived from this file's folder (name and hash).
"""

_FOOTER = """\
# Server-name patterns whose tools run in the cloud; every other server is local.
# [routing]
# cloud = ["github", "slack*"]

# [policy]
# mode = "enforce"    # or "audit": record denials without blocking

# server:tool patterns; deny beats ask beats allow.
# [permissions]
# allow = ["time:*"]
# ask = ["filesystem:write_*"]
# deny = []

# An OpenAI-compatible endpoint for curation names and intent routing (optional).
# [llm]
# base_url = "http://localhost:11434/v1"
# model = "llama3.1"
# api_key_env = "OPENAI_API_KEY"

# Upstream MCP servers: the fields of Claude Desktop "mcpServers" entries. Relative paths
# (a command with a "/", args starting with "./" or "../", cwd) are relative to this file's
# folder; ${VAR} and ${VAR:-default} in command, args, env, cwd, url and headers come from
# PML's environment, so secrets need not be written here.
# [servers.filesystem]
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-filesystem", "./docs"]
# env = { }
#
# [servers.remote]
# url = "https://example.com/mcp"
# headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }
"""


def register(app: typer.Typer) -> None:
    """Add the ``init`` command to ``app``."""
    app.command("init")(init)


def init(
    ctx: typer.Context,
    from_file: FromOption = None,
    force: ForceOption = False,
    config: ConfigOption = None,
) -> None:
    """Write pml.toml, importing mcpServers from a Claude Desktop / Claude Code / Cursor config."""
    # Where every other command will look: --config, then $PML_CONFIG, then ./pml.toml.
    target = config_path(ctx, config) or Path(os.environ.get("PML_CONFIG") or "pml.toml")
    warnings: list[str] = []

    async def body() -> int:
        return write_config(target, from_file, force=force, warn=warnings.append)

    count = run_command(body)
    source = f" from {from_file}" if from_file is not None else ""
    typer.echo(f"wrote {target}: {count} server{'' if count == 1 else 's'} imported{source}")
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def write_config(
    target: Path,
    from_file: Path | None = None,
    *,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> int:
    """Write a starter config to ``target`` (importing ``from_file``); the servers imported."""
    # Imported here: the settings models cost more than the rest of ``pml --help``.
    from pml.config import import_mcp_servers
    from pml.config_travel import derived_project

    if target.is_dir():
        raise ConfigError(f"{target} is a directory")
    if target.exists() and not force:
        raise ConfigError(f"{target} already exists (use --force to overwrite it)")
    servers: dict[str, ServerSettings] = {}
    if from_file is not None:
        # Relative paths stay as written when both files share a folder (they resolve the
        # same way); else they are made absolute against the JSON file's folder.
        same_folder = _same_folder(from_file, target)
        servers = import_mcp_servers(from_file, warn=warn, resolve=not same_folder)
    try:
        data = render_config(servers, project=derived_project(target.parent)).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a JSON "\ud800" escape
        raise ConfigError(f"{from_file}: contains text that is not valid Unicode") from None
    try:
        _write_atomically(target, data)
    except OSError as error:
        raise ConfigError(f"cannot write {target}: {error.strerror or error}") from None
    return len(servers)


def render_config(servers: Mapping[str, ServerSettings], *, project: str = "default") -> str:
    """The text of a commented starter ``pml.toml`` with ``servers`` as tables."""
    import tomli_w

    from pml.config import SandboxSettings, ScopeSettings, default_database_url

    database = tomli_w.dumps({"database_url": default_database_url()})
    scope = ScopeSettings(project=project).model_dump(exclude_none=True)
    parts = [
        _HEADER,
        f"# {database}",
        _MIDDLE,
        _SCOPE,
        tomli_w.dumps({"scope": scope}),
        '# user = "alice"    # default: the OS user\n\n',
        "# Limits of one snippet run.\n",
        tomli_w.dumps({"sandbox": SandboxSettings().model_dump()}),
        "\n",
        _FOOTER,
    ]
    if servers:
        tables = {
            name: server.model_dump(exclude_defaults=True) for name, server in servers.items()
        }
        parts += ["\n# Imported servers.\n", tomli_w.dumps({"servers": tables})]
    return "".join(parts)


def _same_folder(first: Path, second: Path) -> bool:
    try:
        return first.parent.resolve() == second.parent.resolve()
    except OSError:  # a folder that cannot be resolved: rewrite paths to be safe
        return False


def _write_atomically(target: Path, data: bytes) -> None:
    # mkstemp's 0600 mode suits a file that may hold API keys from server env/headers.
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
