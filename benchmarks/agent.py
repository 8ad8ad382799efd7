"""What PML adds to each ``pml agent`` turn, besides the model's own time (SPEC §13).

    python benchmarks/agent.py [--turns 200] [--backend sqlite|postgres]

Opens the gateway in-process with the real ``mcp-server-time`` upstream and runs turns
against an in-process model that answers at once (so only PML's work is timed): half ask
for the time (router → gate → offer → one upstream call through the enforcer → record),
half ask to remember a preference (router → gate → offer → memory post-hook: classify,
store, audit → record). Prints one JSON line:
{"turns", "overhead_p50_ms", "overhead_p95_ms" (the turn minus the model and the tool call),
 "offer_tools", "time_call_p50_ms", "remember_posthook_p50_ms", "remember_posthook_p95_ms"}.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pml.agent.assemble import agent_parts
from pml.agent.model import ApprovalAsk, ChatReply, ConsentAsk, Decision, ToolCall
from pml.agent.terminal import QuietDisplay
from pml.agent.turn import Agent
from pml.config import ScopeSettings, ServerSettings, Settings
from pml.gateway.server import open_gateway
from pml.sections_agent import AgentSettings
from throwaway_postgres import throwaway_database

TIME_TOOL = "time__get_current_time"
WARM_UP_S = 120.0


class InstantModel:
    """Calls the time tool once when offered and asked for the time, then answers."""

    model = "instant"

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> ChatReply:
        del on_text
        names = {tool["function"]["name"] for tool in tools}
        asked_time = "time" in str(messages[-1].get("content"))
        if messages[-1].get("role") == "user" and asked_time and TIME_TOOL in names:
            call = ToolCall("call_1", TIME_TOOL, '{"timezone": "Asia/Tokyo"}')
            return ChatReply("", (call,))
        return ChatReply("Done.")


class Nobody:
    async def approve(self, ask: ApprovalAsk) -> Decision:
        del ask
        return "deny"

    async def consent(self, ask: ConsentAsk) -> bool:
        del ask
        return False

    async def clarify(self, question: str, choices: Sequence[str]) -> str | None:
        del question, choices
        return None


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


async def _warm_up(agent: Agent) -> None:
    """Ten turns, then more until the time tool is offered (at most ``WARM_UP_S``).

    The gateway starts its upstream server and indexes its tools in the background: on a
    busy machine that takes longer than ten turns, and a turn without the tool would be
    timed as one that called nothing."""
    deadline = time.monotonic() + WARM_UP_S
    for turn in itertools.count():
        text = "what time is it in Tokyo" if turn % 2 else f"remember that I like {turn} cats"
        result = await agent.turn(text)
        agent.history.clear()
        called = TIME_TOOL in result.record.get("tools_offered", []) and result.record[
            "timing_ms"
        ].get("tools")
        if turn >= 10 and turn % 2 and called:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the time tool was not offered and called within {WARM_UP_S:.0f} s")


async def run(turns: int, url: str) -> dict[str, Any]:
    time_server = shutil.which("mcp-server-time") or str(
        Path(sys.executable).parent / "mcp-server-time"
    )
    settings = Settings(
        database_url=url,
        scope=ScopeSettings(user="bench"),
        servers={"time": ServerSettings(command=time_server, args=["--local-timezone", "UTC"])},
        agent=AgentSettings(),
    )
    overhead: list[float] = []
    calls: list[float] = []
    posthooks: list[float] = []
    offered = 0
    async with open_gateway(settings) as gateway:
        agent = Agent(
            agent_parts(gateway), InstantModel(), Nobody(), QuietDisplay(), settings=AgentSettings()
        )
        await _warm_up(agent)
        for turn in range(turns):
            text = "what time is it in Tokyo" if turn % 2 else f"remember that I like {turn} cats"
            result = await agent.turn(text)
            agent.history.clear()
            timing = result.record["timing_ms"]
            overhead.append(timing["total"] - timing.get("executor", 0) - timing.get("tools", 0))
            if turn % 2:
                calls.append(timing["tools"])
                offered = len(result.record["tools_offered"])
            else:
                posthooks.append(timing["posthooks"])
    return {
        "turns": turns,
        "overhead_p50_ms": round(statistics.median(overhead), 3),
        "overhead_p95_ms": _percentile(overhead, 0.95),
        "offer_tools": offered,
        "time_call_p50_ms": round(statistics.median(calls), 3),
        "remember_posthook_p50_ms": round(statistics.median(posthooks), 3),
        "remember_posthook_p95_ms": _percentile(posthooks, 0.95),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description="What PML adds to each pml agent turn.")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    options = parser.parse_args()
    if options.backend == "postgres":
        async with throwaway_database() as url:
            result = await run(options.turns, url)
    else:
        with tempfile.TemporaryDirectory() as folder:
            result = await run(options.turns, f"sqlite:///{folder}/bench.db")
    print(json.dumps({"backend": options.backend, **result}))


if __name__ == "__main__":
    asyncio.run(main())
