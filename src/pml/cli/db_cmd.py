"""``pml db upgrade``: apply the database migrations (also done automatically at start)."""

from __future__ import annotations

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command


def register(app: typer.Typer) -> None:
    """Add the ``db`` group to the ``pml`` application."""
    group = typer.Typer(help="Database maintenance.", no_args_is_help=True)

    @group.command("upgrade")
    def upgrade(
        ctx: typer.Context, config: ConfigOption = None, as_json: JsonOption = False
    ) -> None:
        """Apply pending migrations to the configured database."""

        async def body() -> dict[str, str | None]:
            from pml.storage.database import Database, describe_url, head_revision

            settings = load_cli_settings(ctx, config)
            db = await Database.open(settings.database_url, migrate=False)
            try:
                before = await db.current_revision()
                await db.upgrade()
                after = await db.current_revision()
            finally:
                await db.close()
            return {
                "database": describe_url(settings.database_url),
                "from_revision": before,
                "revision": after,
                "head": head_revision(),
            }

        result = run_command(body, as_json=as_json)
        if as_json:
            print_json(result)
        elif result["from_revision"] == result["revision"]:
            typer.echo(f"{result['database']} is up to date (revision {result['revision']}).")
        else:
            before = result["from_revision"] or "an empty database"
            typer.echo(f"Upgraded {result['database']} from {before} to {result['revision']}.")

    app.add_typer(group, name="db")
