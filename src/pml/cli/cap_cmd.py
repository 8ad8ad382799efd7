"""``pml cap list|lookup|whois|rename|history|curate``: the ``cap_*`` tools on the command line
(the lifecycle verbs are in ``cap_lifecycle_cmd``, routing in ``cap_routing_cmd``).

Each verb builds the same arguments an agent would send and calls the same tool, so the
fields, filters and errors are those of SPEC §6.5; ``--json`` prints the tool's JSON::

    pml cap curate                                  # suggest names, change nothing
    pml cap curate --mode auto --min-usage 3        # apply the confident ones
    pml cap curate --rename unnamed_a7f3b2c1=fs:read_json --json
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from pml.cli import cap_bundle_cmd, cap_lifecycle_cmd, cap_routing_cmd
from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.errors import InvalidInput

TagOption = Annotated[
    list[str] | None, typer.Option("--tag", help="A tag (repeat for several; all must match).")
]


def _call(
    ctx: typer.Context, config: Any, tool: str, arguments: dict[str, Any], as_json: bool
) -> dict[str, Any]:
    async def body() -> dict[str, Any]:
        from pml.cli.runtime import open_registry

        async with open_registry(load_cli_settings(ctx, config)) as session:
            return await session.tools.call(tool, session.scope, arguments)

    return run_command(body, as_json=as_json)


def parse_rename(text: str) -> dict[str, str]:
    """``ID=NAME`` as ``{"id", "name"}`` (``INVALID_INPUT`` without an ``=``)."""
    ref, sep, name = text.partition("=")
    if not sep or not ref or not name:
        shown = text if len(text) <= 60 else text[:60] + "…"
        raise InvalidInput(f"--rename expects ID=NAME, not {shown!r}", field="rename")
    return {"id": ref, "name": name}


def _print_fields(data: dict[str, Any], keys: list[str]) -> None:
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key in keys:
        if key in data and data[key] is not None:
            table.add_row(key, Text(str(data[key])))
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``cap`` group to the ``pml`` application."""
    group = typer.Typer(
        help="The capability registry (same as the cap_* tools).", no_args_is_help=True
    )

    @group.command("list")
    def list_(
        ctx: typer.Context,
        pattern: Annotated[
            str | None, typer.Option(help="Glob on the display name, e.g. 'fs:*'.")
        ] = None,
        named_only: Annotated[bool, typer.Option("--named-only")] = False,
        unnamed_only: Annotated[bool, typer.Option("--unnamed-only")] = False,
        tag: TagOption = None,
        created_by: Annotated[str | None, typer.Option("--created-by")] = None,
        visibility: Annotated[
            str | None, typer.Option(help="private, project, org or public.")
        ] = None,
        sort: Annotated[str, typer.Option("--sort", help="usage, name or created.")] = "usage",
        order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
        limit: Annotated[int, typer.Option(help="At most 500.")] = 50,
        offset: int = 0,
        archived: Annotated[
            bool, typer.Option("--archived", help="The archived capabilities instead.")
        ] = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List the capabilities visible in your scope."""
        arguments: dict[str, Any] = {
            "archived": archived,
            "named_only": named_only,
            "unnamed_only": unnamed_only,
            "sort_by": sort,
            "limit": limit,
            "offset": offset,
        }
        optional = {
            "pattern": pattern,
            "tags": tag,
            "created_by": created_by,
            "visibility": visibility,
            "order": order,
        }
        arguments.update({key: value for key, value in optional.items() if value is not None})
        result = _call(ctx, config, "cap_list", arguments, as_json)
        if as_json:
            print_json(result)
            return
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table("name", "fqdn", "uses", "success", "routing", "visibility", "version")
        for item in result["items"]:
            cells = (
                item["display_name"],
                item["fqdn"],
                str(item["usage_count"]),
                f"{item['success_rate']:.0%}",
                item["routing"],
                item["visibility"],
                str(item["version"]),
            )
            table.add_row(*(Text(cell) for cell in cells))
        console = Console()
        console.print(table)
        shown = len(result["items"])
        console.print(f"{shown} shown of {result['total']} (offset {offset}).")

    @group.command("lookup")
    def lookup(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="Name, alias, FQDN or tool name, with @version.")],
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Resolve a name to its capability (or MCP server record)."""
        result = _call(ctx, config, "cap_lookup", {"name": name}, as_json)
        if as_json:
            print_json(result)
            return
        alias = result.get("deprecatedAlias")
        if alias:
            typer.echo(f"warning: {alias['message']}", err=True)
        if result.get("deprecated"):
            typer.echo(f"warning: {result['deprecated']}", err=True)
        _print_fields(
            result,
            [
                "display_name",
                "fqdn",
                "type",
                "tool_name",
                "description",
                "version",
                "version_tag",
                "routing",
                "visibility",
                "usage_count",
                "success_rate",
                "code_url",
            ],
        )

    @group.command("whois")
    def whois(
        ctx: typer.Context,
        fqdn: Annotated[str, typer.Argument(help="<org>.<project>.<namespace>.<action>.<hash>")],
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Show everything about one capability: record, aliases, versions."""
        result = _call(ctx, config, "cap_whois", {"fqdn": fqdn}, as_json)
        if as_json:
            print_json(result)
            return
        shown = {**result, "aliases": ", ".join(a["alias"] for a in result["aliases"]) or None}
        remembered: list[dict[str, Any]] = result.get("intents") or []  # newest first
        shown["intents"] = "\n".join(f"{i['text']} (×{i['uses']})" for i in remembered) or None
        _print_fields(shown, [key for key in shown if key not in {"code", "parameters_schema"}])
        if result.get("code"):
            from rich.console import Console

            Console().print("[bold]code[/bold]")
            typer.echo(result["code"])

    @group.command("rename")
    def rename(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="The capability to change.")],
        new_name: Annotated[str | None, typer.Argument(help="Its new display name.")] = None,
        description: Annotated[str | None, typer.Option()] = None,
        tag: TagOption = None,
        visibility: Annotated[str | None, typer.Option()] = None,
        routing: Annotated[
            str | None, typer.Option(help="local or cloud (explicit override).")
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Rename a capability (the old name stays as an alias) and/or change its metadata."""
        fields = {
            "new_name": new_name,
            "description": description,
            "tags": tag,
            "visibility": visibility,
            "routing": routing,
        }
        arguments = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        result = _call(ctx, config, "cap_rename", arguments, as_json)
        if as_json:
            print_json(result)
            return
        typer.echo(f"{result['display_name']} ({result['fqdn']}) updated.")

    @group.command("history")
    def history(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="Name, alias, FQDN or tool name.")],
        before: Annotated[
            int | None, typer.Option(help="Only versions older than this one.")
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Show a capability's versions, newest first, with diffs (20 at a time)."""
        arguments: dict[str, object] = {"name": name}
        if before is not None:
            arguments["before"] = before
        result = _call(ctx, config, "cap_history", arguments, as_json)
        if as_json:
            print_json(result)
            return
        for entry in result["versions"]:
            tag = f" ({entry['version_tag']})" if entry["version_tag"] else ""
            typer.echo(
                f"v{entry['version']}{tag}  {entry['updated_at']}  {entry['updated_by']}  "
                f"{entry['change_summary'] or ''}"
            )
            if entry["diff"]:
                typer.echo(entry["diff"])
        if "next_before" in result:
            typer.echo(f"Older versions: pml cap history {name} --before {result['next_before']}")

    @group.command("curate")
    def curate(
        ctx: typer.Context,
        mode: Annotated[
            str | None,
            typer.Option(help="suggest, auto or apply (default: apply if --rename, else suggest)."),
        ] = None,
        unnamed_only: Annotated[
            bool,
            typer.Option("--unnamed-only/--all", help="Only unnamed capabilities (default)."),
        ] = True,
        min_usage: Annotated[
            int, typer.Option("--min-usage", help="Only capabilities used at least N times.")
        ] = 0,
        rename: Annotated[
            list[str] | None,
            typer.Option(
                "--rename",
                metavar="ID=NAME",
                help="For apply: rename ID (FQDN, name or id) to NAME; repeat for several.",
            ),
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Suggest names for unnamed capabilities, apply the confident ones, or rename."""
        from pml.cli.curation_view import print_curation, run_curation

        async def body() -> dict[str, Any]:
            renames = [parse_rename(item) for item in rename or []]
            arguments: dict[str, Any] = {
                "mode": mode if mode is not None else ("apply" if renames else "suggest"),
                "filter": {"unnamed_only": unnamed_only, "min_usage": min_usage},
            }
            if renames:
                arguments["renames"] = renames
            settings = load_cli_settings(ctx, config)
            return await run_curation(settings, arguments, environ=os.environ)

        result = run_command(body, as_json=as_json)
        if as_json:
            print_json(result)
        else:
            from rich.console import Console

            print_curation(result, Console())
        failed = [item for item in result["skipped"] if "error" in item]
        if failed:
            print(
                f"error: {len(failed)} rename(s) not applied (see skipped)",
                file=sys.stderr,
            )
            raise typer.Exit(code=1)

    cap_routing_cmd.register(group)
    cap_bundle_cmd.register(group)
    cap_lifecycle_cmd.register(group)
    app.add_typer(group, name="cap")
