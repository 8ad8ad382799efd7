"""``pml keys create|list|revoke``: API keys for ``pml serve --http`` (SPEC §1, §11).

    pml keys create --org acme --project webapp --user erwan              # an agent key
    pml keys create --org acme --project webapp --user ana --role admin   # a person's key

The key is printed once, by ``create``; only its hash is stored, so a lost key is revoked
and replaced, never recovered. ``--role`` is ``agent`` (the default: the MCP surface and its
own user's audit events) or ``admin`` (also approvals, every user's audit events of its
org/project, the dashboard). ``--json`` prints ``{"key", "org", "project", "user", "role",
"id"}`` for ``create``, ``{"items": [...]}`` (each with its ``role``) for ``list`` and the
revoked key for ``revoke``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.cli.status_cmd import safe_text

if TYPE_CHECKING:
    from pml.gateway.keys import ApiKeyRecord, ApiKeys

T = TypeVar("T")

OrgFilter = Annotated[str | None, typer.Option("--org", help="Only keys of this org.")]
ProjectFilter = Annotated[str | None, typer.Option("--project", help="Only keys of this project.")]


def _with_keys(
    ctx: typer.Context,
    config: Any,
    as_json: bool,
    action: Callable[[ApiKeys], Awaitable[T]],
) -> T:
    """Run ``action`` on the configured database (migrated on open, like every writer)."""

    async def body() -> T:
        from pml.gateway.keys import ApiKeys
        from pml.storage.database import Database

        settings = load_cli_settings(ctx, config)
        db = await Database.open(settings.database_url)
        try:
            return await action(ApiKeys(db))
        finally:
            await db.close()

    return run_command(body, as_json=as_json)


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def _print_records(records: list[ApiKeyRecord]) -> None:
    if not records:
        typer.echo("no API keys (create one with `pml keys create --org O --project P`)")
        return
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table

    table = Table("id", "prefix", "org", "project", "user", "role", "created", "last used", "state")
    for record in records:
        data = record.to_dict()
        table.add_row(
            *(
                safe_text(value)
                for value in (
                    record.id,
                    record.prefix,
                    record.org,
                    record.project,
                    record.user or "-",
                    record.role,
                    _when(data["created_at"]),
                    _when(data["last_used_at"]),
                    "active" if record.active else f"revoked {_when(data['revoked_at'])}",
                )
            )
        )
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to the ``pml`` application."""
    group = typer.Typer(help="API keys for `pml serve --http`.", no_args_is_help=True)

    @group.command("create")
    def create(
        ctx: typer.Context,
        org: Annotated[str, typer.Option("--org", help="The org the key acts in.")],
        project: Annotated[str, typer.Option("--project", help="The project the key acts in.")],
        user: Annotated[
            str | None,
            typer.Option("--user", help="The user the key acts as (default: key:<prefix>)."),
        ] = None,
        role: Annotated[
            str,
            typer.Option(
                "--role",
                metavar="agent|admin",
                help="agent: the MCP surface and its own audit events; admin: also approvals, "
                "every user's audit events, the dashboard.",
            ),
        ] = "agent",
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Create a key; it is printed once and only its hash is stored."""
        key, record = _with_keys(
            ctx, config, as_json, lambda keys: keys.create(org, project, user, role=role)
        )
        if as_json:
            print_json(
                {
                    "key": key,
                    "org": record.org,
                    "project": record.project,
                    "user": record.user,
                    "role": record.role,
                    "id": record.id,
                }
            )
            return
        who = record.user or f"key:{record.prefix}"
        typer.echo(key)
        print(
            f"warning: this key will not be shown again; store it now "
            f"(scope {record.org}.{record.project} as {who}, role {record.role}, id {record.id}).",
            file=sys.stderr,
        )

    @group.command("list")
    def list_(
        ctx: typer.Context,
        org: OrgFilter = None,
        project: ProjectFilter = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List keys (never the keys themselves): prefix, scope, state and last use."""
        records = _with_keys(ctx, config, as_json, lambda keys: keys.list(org, project))
        if as_json:
            print_json({"items": [record.to_dict() for record in records]})
            return
        _print_records(records)

    @group.command("revoke")
    def revoke(
        ctx: typer.Context,
        key: Annotated[str, typer.Argument(metavar="ID_OR_PREFIX", help="Key id or prefix.")],
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Revoke a key: requests carrying it get 401 from now on."""
        record = _with_keys(ctx, config, as_json, lambda keys: keys.revoke(key))
        if as_json:
            print_json(record.to_dict())
            return
        typer.echo(
            f"revoked {record.prefix} (id {record.id}, {record.org}.{record.project}, "
            f"at {_when(record.to_dict()['revoked_at'])})"
        )

    app.add_typer(group, name="keys")
