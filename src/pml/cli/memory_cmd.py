"""``pml memory list|forget``: what PML remembers for you, and forgetting it (SPEC §13).

    pml memory list                            # the newest 50 facts, newest first
    pml memory list --search metric --limit 20
    pml memory list --json                     # {"items": [{"id", "text", "sensitivity",
                                               #   "source", "request_id", "created_at"}]}
    pml memory forget 3f2a9c1e                 # by id, or a unique start of it (4+ characters)
    pml memory forget 3f2a9c1e --json          # {"forgotten": {...the fact...}}

The facts are those of the configured scope's user (``[scope]`` org, project and user, on
the configured database). The table shows the start of each id, when, how sensitive, who
stored it and the text, shortened to one line with control and bidi characters shown
escaped. A fact that is not there (or is another user's) is ``NOT_FOUND``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.cli.status_cmd import safe_text
from pml.errors import NotFound

if TYPE_CHECKING:
    from pml.memory.store import MemoryFact, MemoryStore
    from pml.registry.scope import Scope

T = TypeVar("T")

DEFAULT_LIMIT = 50
ID_SHOWN = 8
TEXT_SHOWN = 80


def _short(text: str) -> str:
    """At most ``TEXT_SHOWN`` characters (newlines are shown escaped, on one line)."""
    return text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"


def _print_facts(facts: list[MemoryFact]) -> None:
    if not facts:
        typer.echo("no memories", err=True)
        return
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table

    table = Table("id", "created", "sensitivity", "source", "text")
    for fact in facts:
        table.add_row(
            safe_text(fact.id[:ID_SHOWN]),
            safe_text(fact.created_at.isoformat()[:16].replace("T", " ")),
            safe_text(fact.sensitivity),
            safe_text(fact.source),
            safe_text(_short(fact.text)),
        )
    Console().print(table)


def _in_store(
    ctx: typer.Context,
    config: Path | None,
    as_json: bool,
    action: Callable[[MemoryStore, Scope], Awaitable[T]],
) -> T:
    """Run ``action(store, scope)`` on the configured database as the configured user."""

    async def body() -> T:
        from pml.memory.store import MemoryStore
        from pml.storage.database import Database
        from pml.wiring import scope_of

        settings = load_cli_settings(ctx, config)
        scope = scope_of(settings)
        db = await Database.open(settings.database_url)
        try:
            return await action(MemoryStore(db), scope)
        finally:
            await db.close()

    return run_command(body, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add the ``memory`` group to the ``pml`` application."""
    group = typer.Typer(help="What PML remembers for you.", no_args_is_help=True)

    @group.command("list")
    def list_(
        ctx: typer.Context,
        limit: Annotated[
            int, typer.Option("--limit", help="Show the newest N facts (1-1000).")
        ] = DEFAULT_LIMIT,
        search: Annotated[
            str | None,
            typer.Option("--search", help="Only facts whose text holds this (any case)."),
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List your remembered facts, newest first."""

        async def action(store: MemoryStore, scope: Scope) -> list[MemoryFact]:
            return await store.list(scope, limit=limit, query=search)

        facts = _in_store(ctx, config, as_json, action)
        if as_json:
            print_json({"items": [fact.to_dict() for fact in facts]})
            return
        _print_facts(facts)

    @group.command("forget")
    def forget(
        ctx: typer.Context,
        fact_id: Annotated[
            str, typer.Argument(metavar="ID", help="The fact's id, or a unique start of it.")
        ],
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Forget one remembered fact (it is deleted)."""

        async def action(store: MemoryStore, scope: Scope) -> MemoryFact:
            fact = await store.find(scope, fact_id)
            if fact is None or not await store.forget(scope, fact.id):
                raise NotFound(f"No memory with id {fact_id[:40]!r} (see `pml memory list`).")
            return fact

        fact = _in_store(ctx, config, as_json, action)
        if as_json:
            print_json({"forgotten": fact.to_dict()})
            return
        typer.echo(f"forgot {safe_text(fact.id).plain}: {safe_text(_short(fact.text)).plain}")

    app.add_typer(group, name="memory")
