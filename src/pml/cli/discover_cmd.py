"""``pml discover INTENT``: ``pml_discover`` from a shell.

    pml discover "read a json file"
    pml discover "who changed the last commits" --kind tool --limit 3 --json

It opens the configured gateway (database, upstream servers, the discovery index) and calls
the same tool an agent calls, so the results and errors are those of SPEC §7.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, cast

import typer

from pml.cli.common import (
    ConfigOption,
    JsonOption,
    call_gateway_tool,
    load_cli_settings,
    print_json,
    run_command,
)

DESCRIPTION_CHARS = 100


def _summary(results: list[dict[str, Any]]) -> None:
    if not results:
        typer.echo("nothing found")
        return
    for item in results:
        description = " ".join(str(item.get("description", "")).split())
        if len(description) > DESCRIPTION_CHARS:
            description = description[: DESCRIPTION_CHARS - 1] + "…"
        typer.echo(f"{item['score']:.2f}  {item['kind']:<10}  {item['callName']}  {description}")
        schema = item.get("inputSchema")
        if isinstance(schema, dict):
            properties = cast("dict[str, Any]", schema).get("properties")
            if isinstance(properties, dict) and properties:
                typer.echo(f"      args: {json.dumps(sorted(cast('dict[str, Any]', properties)))}")


def register(app: typer.Typer) -> None:
    """Add ``pml discover`` to the ``pml`` application."""

    @app.command("discover")
    def discover(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        intent: Annotated[str, typer.Argument(help="What you want to do, in plain words.")],
        kind: Annotated[str, typer.Option("--kind", help="tool, capability or all.")] = "all",
        limit: Annotated[int, typer.Option("--limit", help="At most this many (1-50).")] = 5,
        min_score: Annotated[
            float, typer.Option("--min-score", help="Drop results below this score (0-1).")
        ] = 0.0,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Find the tools and capabilities that fit an intent."""

        async def body() -> dict[str, Any]:
            arguments = {"intent": intent, "kind": kind, "limit": limit, "min_score": min_score}
            settings = load_cli_settings(ctx, config)
            return await call_gateway_tool(settings, "pml_discover", arguments)

        answer = run_command(body, as_json=as_json)
        if as_json:
            print_json(answer)
        else:
            _summary(cast("list[dict[str, Any]]", answer.get("results", [])))
