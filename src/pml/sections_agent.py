"""Settings sections for agent mode and memory consent: ``[agent]`` and ``[memory]`` (SPEC §13).

[agent]
max_round_trips = 8          # executor rounds per turn (each may call tools)
history_tokens = 6000        # the conversation kept for the next turn (oldest dropped first)
on_unclear = "ask"           # or "read_only": what a low-confidence route does
upstream_tools = true        # offer upstream tools (filtered per turn) to the executor
tool_result_chars = 12000    # what the model sees of one tool result (head + tail)
timeout_s = 120              # one executor round, the whole streamed reply

[memory]
auto_store = "low"           # "low": low-sensitivity facts are stored without asking;
                             # "none": every memory write waits for the person's consent
llm_classify = true          # ask [llm] too (the heuristics stay the floor)
prefetch = 20                # remembered facts shown to the executor when it may read memory
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AgentSettings(BaseModel):
    """``[agent]``: how ``pml agent`` runs its executor."""

    model_config = ConfigDict(extra="forbid")

    max_round_trips: int = Field(default=8, ge=1, le=50)
    history_tokens: int = Field(default=6000, ge=200, le=1_000_000)
    on_unclear: Literal["ask", "read_only"] = "ask"
    upstream_tools: bool = True
    tool_result_chars: int = Field(default=12_000, ge=200, le=1_000_000)
    # How long one executor round (a whole streamed reply) may take.
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # The executor's reply budget per round (sent as max_tokens; None: the endpoint's own).
    max_tokens: int | None = Field(default=None, ge=16, le=200_000)


class MemorySettings(BaseModel):
    """``[memory]``: what the memory post-hook stores without asking."""

    model_config = ConfigDict(extra="forbid")

    auto_store: Literal["low", "none"] = "low"
    llm_classify: bool = True
    prefetch: int = Field(default=20, ge=0, le=200)
    max_facts: int = Field(default=10_000, ge=1, le=1_000_000)
