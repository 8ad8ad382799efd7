"""``pml cap routing``: make stored routing follow ``[routing]`` now (SPEC §8, §14).

The gateway does this at every start; the command is for checking what a config change
will do, or applying it while a gateway keeps running (which hears of it as of a rename)::

    pml cap routing --check            # what would change, changes nothing
    pml cap routing                    # apply, print what changed
    pml cap routing --check --json

It covers every org/project in the configured database, as the gateway's start does.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command

CheckOption = Annotated[
    bool, typer.Option("--check", help="Only list what would change; store nothing.")
]


async def _run(settings: Any, *, check: bool) -> dict[str, Any]:
    from pml.cli.runtime import open_registry
    from pml.registry.changes import ChangeAnnouncer
    from pml.registry.routing_sync import sync_routing
    from pml.wiring import routing_rules

    rules = routing_rules(settings)
    async with open_registry(settings) as session:
        changes = await sync_routing(
            session.db,
            rules,
            apply=not check,
            announce=ChangeAnnouncer(session.db).announce,
            auditor=session.registry.auditor,
            user=session.scope.user,
            trigger="cli",
        )
    return {
        "check": check,
        "count": len(changes),
        "changes": [change.to_dict() for change in changes],
    }


def _print(result: dict[str, Any]) -> None:
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table
    from rich.text import Text

    console = Console()
    changes: list[dict[str, str]] = result["changes"]
    if not changes:
        console.print("Stored routing already follows [routing]; nothing to change.", markup=False)
        return
    table = Table("name", "fqdn", "routing")
    for change in changes:
        table.add_row(
            Text(change["name"]), Text(change["fqdn"]), Text(f"{change['from']} → {change['to']}")
        )
    console.print(table)
    verb = "would change (nothing stored)" if result["check"] else "changed"
    console.print(f"{len(changes)} capabilities {verb}.")


def register(group: typer.Typer) -> None:
    """Add ``routing`` to the ``pml cap`` group."""

    @group.command("routing")
    def routing(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        check: CheckOption = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Re-derive stored routing from the config's routing patterns (every capability
        without an explicit override, in every org/project)."""

        async def body() -> dict[str, Any]:
            return await _run(load_cli_settings(ctx, config), check=check)

        result = run_command(body, as_json=as_json)
        if as_json:
            print_json(result)
        else:
            _print(result)
