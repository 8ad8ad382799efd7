"""``pml connect --server URL --api-key KEY``: the local client of a shared PML (SPEC §9).

Speaks MCP over stdin/stdout to the agent, forwards the meta-tools to the shared gateway
with the key, runs the code the gateway hands back on this machine (the servers of this
machine's ``pml.toml``), and syncs the runs' traces in the background (a durable queue).
The key may come from ``$PML_API_KEY`` instead of the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pml.cli.common import ConfigOption, llm_key, load_cli_settings, run_command
from pml.errors import InvalidInput

MAX_KEY_CHARS = 512


def register(app: typer.Typer) -> None:
    """Add ``connect`` to the ``pml`` application."""

    @app.command("connect")
    def connect(
        ctx: typer.Context,
        server: Annotated[
            str,
            typer.Option("--server", metavar="URL", help="The shared PML (http(s)://host:port)."),
        ],
        api_key: Annotated[
            str,
            typer.Option(
                "--api-key", envvar="PML_API_KEY", help="Your API key for it ($PML_API_KEY)."
            ),
        ],
        queue: Annotated[
            Path | None,
            typer.Option("--queue", help="Trace queue file (default: in the user data dir)."),
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Run the local client: a stdio MCP server for your agent, backed by a shared PML."""

        async def body() -> None:
            key = api_key.strip()
            # It goes in HTTP headers: printable ASCII without spaces.
            printable = key.isascii() and key.isprintable() and " " not in key
            if not key or len(key) > MAX_KEY_CHARS or not printable:
                raise InvalidInput("--api-key: not an API key", field="api_key")
            settings = load_cli_settings(ctx, config)
            from pml.client.remote import mcp_url
            from pml.client.serve import serve_connect

            mcp_url(server)  # a bad URL is one clear line, before anything starts
            await serve_connect(
                settings,
                server_url=server,
                api_key=key,
                queue_path=queue,
                llm_api_key=llm_key(settings),
            )

        try:
            run_command(body)
        except KeyboardInterrupt:
            raise typer.Exit(code=130) from None
