"""``pml cap export|import``: capabilities moved between orgs/projects as a JSON bundle.

    pml cap export 'fs:*' --out fs.json        # the active capabilities of [scope] named fs:*
    pml cap export > all.json                  # the bundle on stdout, notes on stderr
    pml cap import fs.json --dry-run           # the report, nothing changed
    pml cap import fs.json --on-conflict rename --json

A capability whose code still holds a credential-like literal is never written to a bundle
(nor imported from one): it is listed as left out.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.errors import InvalidInput

if TYPE_CHECKING:
    from rich.console import Console

OnConflictOption = Annotated[
    str,
    typer.Option(
        "--on-conflict",
        help="When a name is taken: skip the capability, or rename it (name_2, name_3, ...).",
    ),
]


def _table(console: Console, title: str, columns: list[str], rows: list[list[str]]) -> None:
    if not rows:
        return
    from rich.table import Table  # here: pml serve never prints a table
    from rich.text import Text

    table = Table(*columns, title=title, title_justify="left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)


def _print_export(result: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    rows = [[e["name"], e["fqdn"], str(e["versions"])] for e in result["exported"]]
    _table(console, "Exported", ["name", "fqdn", "versions"], rows)
    _print_left_out(console, result["leftOut"])
    console.print(
        f"{len(result['exported'])} capabilities written to {result['out']}.", markup=False
    )


def _print_left_out(console: Console, left_out: list[dict[str, str]]) -> None:
    rows = [[e["name"], e["fqdn"], e["message"]] for e in left_out]
    _table(console, "Left out", ["name", "fqdn", "why"], rows)


def _print_import(report: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    imported = [[e["name"], e["fqdn"], e["from"]] for e in report["imported"]]
    _table(console, "Imported", ["name", "fqdn", "from"], imported)
    renamed = [[e["from"], e["name"], e["fqdn"]] for e in report["renamed"]]
    _table(console, "Renamed", ["name in bundle", "imported as", "fqdn"], renamed)
    skipped = [[e["name"], e["reason"], e["message"]] for e in report["skipped"]]
    _table(console, "Skipped", ["name", "reason", "why"], skipped)
    unresolved = [[e["name"], e["reference"]] for e in report["unresolved"]]
    _table(console, "Unresolved references", ["name", "calls"], unresolved)
    dropped = [[e["name"], e["alias"]] for e in report["aliasesDropped"]]
    _table(console, "Aliases not re-created (taken)", ["name", "alias"], dropped)
    done = "would be imported (dry run: nothing changed)" if report["dryRun"] else "imported"
    console.print(
        f"{len(report['imported'])} capabilities {done}, {len(report['skipped'])} skipped.",
        markup=False,
    )


def _on_conflict(value: str) -> Any:
    from pml.registry.bundle_import import ON_CONFLICT

    if value not in ON_CONFLICT:
        raise InvalidInput(
            f"--on-conflict must be one of: {', '.join(ON_CONFLICT)}", field="on_conflict"
        )
    return value


def register(group: typer.Typer) -> None:
    """Add ``export`` and ``import`` to the ``pml cap`` group."""

    @group.command("export")
    def export(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        pattern: Annotated[
            str | None, typer.Argument(help="Glob on the display name, e.g. 'fs:*' (default: all).")
        ] = None,
        out: Annotated[
            Path | None, typer.Option("--out", help="Write the bundle here (default: stdout).")
        ] = None,
        named_only: Annotated[
            bool, typer.Option("--named-only", help="Leave unnamed capabilities out.")
        ] = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Write the active capabilities of your scope (versions, aliases, tags) as a bundle."""

        async def body() -> dict[str, Any]:
            from pml.cli.runtime import open_registry
            from pml.registry.bundle import export_capabilities, json_text

            async with open_registry(load_cli_settings(ctx, config)) as session:
                result = await export_capabilities(
                    session.db, session.scope, pattern=pattern, named_only=named_only
                )
            text = json_text(result.bundle)
            if out is not None:
                try:
                    out.write_text(text, encoding="utf-8")
                except OSError as error:
                    raise InvalidInput(f"Cannot write {out}: {error.strerror or error}") from None
            return result.report() | {"out": str(out) if out is not None else None, "text": text}

        result = run_command(body, as_json=as_json)
        text: str = result.pop("text")
        if out is None:
            sys.stdout.write(text)
            for entry in result["leftOut"]:
                print(
                    f"warning: left out {entry['name']} ({entry['fqdn']}): {entry['message']}",
                    file=sys.stderr,
                )
        elif as_json:
            print_json(result)
        else:
            _print_export(result)

    @group.command("import")
    def import_(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        file: Annotated[Path, typer.Argument(help="A bundle written by pml cap export.")],
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Report what would happen; change nothing.")
        ] = False,
        on_conflict: OnConflictOption = "skip",
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Import a bundle into your scope: new FQDNs; duplicates and conflicts reported."""

        async def body() -> dict[str, Any]:
            from pml.cli.runtime import open_registry
            from pml.registry.bundle_import import import_bundle
            from pml.registry.bundle_schema import load_bundle
            from pml.wiring import routing_rules

            conflict = _on_conflict(on_conflict)
            bundle = load_bundle(file)
            settings = load_cli_settings(ctx, config)
            async with open_registry(settings) as session:
                report = await import_bundle(
                    session.registry,
                    session.scope,
                    bundle,
                    rules=routing_rules(settings),
                    on_conflict=conflict,
                    dry_run=dry_run,
                )
            return report.to_dict()

        report = run_command(body, as_json=as_json)
        if as_json:
            print_json(report)
        else:
            _print_import(report)
