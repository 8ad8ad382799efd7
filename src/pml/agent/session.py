"""Opening everything ``pml agent`` needs, then running its loop.

    code = await run_agent(settings, api_key, "what time is it in Tokyo", as_json=False)

The gateway is opened in-process on the configured database and servers (the same services
``pml serve`` runs), the executor model on ``[llm]``; a turn's text, its tool lines and its
questions go to stdout, warnings to stderr.
"""

from __future__ import annotations

import sys

from pml.agent.assemble import agent_parts
from pml.agent.chat import OpenAiChat
from pml.agent.repl import run_conversation, run_once
from pml.agent.terminal import LineReader, QuietDisplay, TerminalDisplay, TerminalPerson
from pml.agent.turn import Agent
from pml.config import Settings
from pml.errors import ConfigError
from pml.llm import open_llm


async def run_agent(
    settings: Settings, api_key: str | None, once: str | None, *, as_json: bool
) -> int:
    """Run one turn (``once``) or a conversation; the process's exit code."""
    from pml.gateway.server import open_gateway

    if settings.llm is None:
        raise ConfigError("pml agent needs an [llm] section")
    out = sys.stdout
    reader = LineReader(sys.stdin.fileno())
    interactive = sys.stdin.isatty()
    display = TerminalDisplay(out)
    person = TerminalPerson(
        reader,
        sys.stderr if as_json else out,
        interactive=interactive,
        display=None if as_json else display,
    )
    shown = QuietDisplay() if as_json else display
    async with (
        open_gateway(settings, llm_api_key=api_key) as gateway,
        open_llm(settings.llm, api_key=api_key) as llm,
        OpenAiChat.from_settings(
            settings.llm,
            api_key=api_key,
            max_tokens=settings.agent.max_tokens,
            timeout_s=settings.agent.timeout_s,
        ) as model,
    ):
        agent = Agent(agent_parts(gateway, llm=llm), model, person, shown, settings=settings.agent)
        if once is not None:
            # One turn, no person typing meanwhile: its tools are every server that starts.
            await gateway.pool.settled(settings.upstream.start_timeout_s)
            return await run_once(agent, once, None if as_json else display, out, as_json=as_json)
        out.write(
            f"pml agent on {settings.llm.model} — Ctrl-C cancels a turn, Ctrl-D or /exit ends\n"
        )
        return await run_conversation(agent, reader, display, out)
