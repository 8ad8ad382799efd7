"""``pml agent``: a terminal agent on the ``[llm]`` endpoint, inside PML's pipeline (SPEC §13).

    pml agent                                   # a conversation (Ctrl-C cancels a turn)
    pml agent --once "what time is it in Tokyo" # one turn, then exit
    pml agent --once "..." --json               # one JSON object: answer, tools, memory

Each turn: router → policy gate → the model with only the tools the gate allows → tool calls
through the one enforcement point → memory post-hook → one pipeline record
(``pml audit show REQUEST_ID``). Approvals, memory consent and clarifying questions are
asked at the terminal; without one they are refused. The endpoint's key is read from the
variable ``[llm] api_key_env`` names, never from a file.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pml.cli.common import (
    ConfigOption,
    DebugRoutingOption,
    fail,
    llm_key,
    load_cli_settings,
    with_debug_routing,
)
from pml.errors import ConfigError, PmlError

NO_LLM = (
    "pml agent needs an [llm] section (an OpenAI-compatible endpoint with tool calling): "
    'base_url = "http://127.0.0.1:8080/v1", model = "...", and api_key_env naming the '
    "variable that holds its key (see docs/agent.md)"
)


def register(app: typer.Typer) -> None:
    """Add ``pml agent`` to the ``pml`` application."""

    @app.command("agent")
    def agent(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        once: Annotated[
            str | None,
            typer.Option("--once", metavar="PROMPT", help="Run one turn for PROMPT and exit."),
        ] = None,
        config: ConfigOption = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="With --once: print one JSON object at the end.")
        ] = False,
        debug_routing: DebugRoutingOption = False,
    ) -> None:
        """Talk to the model of the llm section, inside PML's policy, approvals and memory."""
        if as_json and once is None:
            raise fail(ConfigError("--json needs --once PROMPT"), as_json=True)
        try:
            settings = with_debug_routing(load_cli_settings(ctx, config), debug_routing)
            if settings.llm is None:
                raise ConfigError(NO_LLM)
            if once is not None and not once.strip():
                from pml.errors import InvalidInput

                raise InvalidInput("--once needs a non-empty PROMPT", field="once")
            import asyncio

            from pml.agent.session import run_agent

            code = asyncio.run(run_agent(settings, llm_key(settings), once, as_json=as_json))
        except PmlError as error:
            raise fail(error, as_json=as_json) from None
        except KeyboardInterrupt:
            code = 130
        sys.stdout.flush()
        raise typer.Exit(code)
