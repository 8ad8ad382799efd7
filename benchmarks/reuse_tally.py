"""The token tallies of ``benchmarks/reuse.py``: one per way, three accountings each.

tally = Tally(tokens)                  # tokens(text) -> int, the cl100k tokenizer
tally.listed(list_result)              # tools/list, once per session
tally.exchange(name, arguments, result, run=(round_index, task_index))
tally.summary(later_runs, value_tokens)   # value_tokens: {(round, task): tokens of the value}

``wire`` counts every result as the JSON it crosses the wire as (both the text and the
structured copy), ``model_reads`` what clients hand the model (the content blocks;
``structuredContent`` only when a result has no content), ``overhead`` is ``model_reads`` less
the tokens of each run's own answer (never below zero per run). See ``reuse.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_types import CallToolResult, ListToolsResult, TextContent

Json = dict[str, Any]
Run = tuple[int, int]  # (round index, task index): round 0 is the first time a task is done


def wire(data: object) -> str:
    """Compact UTF-8 JSON, as the SDK sends it; a value JSON cannot hold is shown as text."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)


def read(result: CallToolResult | ListToolsResult) -> Json:
    """A result as it crosses the wire, without the protocol's ``_meta`` and ``resultType``
    (for the client, not the model)."""
    exclude = {"meta", "result_type"}
    return result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=exclude)


def model_text(result: CallToolResult) -> list[str]:
    """What an MCP client gives the model of a tool result: each content block (a text block
    as its text, another kind as its JSON), or the structured copy when there is no content."""
    if not result.content:
        return [] if result.structured_content is None else [wire(result.structured_content)]
    return [
        block.text
        if isinstance(block, TextContent)
        else wire(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        for block in result.content
    ]


@dataclass
class Accounting:
    """One way's tokens under one accounting: ``tools/list`` once, then each run's calls."""

    session: int = 0
    runs: dict[Run, int] = field(default_factory=dict[Run, int])

    def add(self, run: Run, tokens: int) -> None:
        self.runs[run] = self.runs.get(run, 0) + tokens

    @property
    def first(self) -> int:
        return sum(tokens for (round_index, _), tokens in self.runs.items() if round_index == 0)

    @property
    def repeat(self) -> int:
        return sum(tokens for (round_index, _), tokens in self.runs.items() if round_index > 0)

    def without_answers(self, value_tokens: Mapping[Run, int]) -> Accounting:
        """Each run less the tokens of its own answer, never below zero."""
        runs = {run: max(0, tokens - value_tokens.get(run, 0)) for run, tokens in self.runs.items()}
        return Accounting(self.session, runs)

    def summary(self, later_runs: int) -> Json:
        return {
            "session_tokens": self.session,
            "first_tokens": self.first,
            "repeat_tokens": self.repeat,
            "total_tokens": self.session + self.first + self.repeat,
            "per_repeat_run": round(self.repeat / later_runs, 1) if later_runs else 0.0,
        }


@dataclass
class Tally:
    """The tokens one way spends, counted with ``tokens`` (text -> number of tokens)."""

    tokens: Callable[[str], int]
    wire: Accounting = field(default_factory=Accounting)
    model_reads: Accounting = field(default_factory=Accounting)
    calls: int = 0
    notes: dict[str, int] = field(default_factory=dict[str, int])
    by_call: dict[str, int] = field(default_factory=dict[str, int])

    def count(self, data: object) -> int:
        return self.tokens(wire(data))

    def listed(self, result: ListToolsResult) -> None:
        """A ``tools/list`` the agent reads: the same in every accounting."""
        tokens = self.count(read(result))
        self.wire.session += tokens
        self.model_reads.session += tokens

    def exchange(self, name: str, arguments: Json, result: CallToolResult, *, run: Run) -> None:
        request = self.count({"name": name, "arguments": arguments})
        on_wire = request + self.count(read(result))
        self.wire.add(run, on_wire)
        self.model_reads.add(run, request + sum(map(self.tokens, model_text(result))))
        self.calls += 1
        kind = name if name.startswith("pml_") else "capability_tool"
        kind = "upstream_tool" if "__" not in name and kind == "capability_tool" else kind
        self.by_call[kind] = self.by_call.get(kind, 0) + on_wire

    def summary(self, later_runs: int, value_tokens: Mapping[Run, int]) -> Json:
        """``wire`` figures at the top (with calls and notes), the other two nested."""
        return {
            **self.wire.summary(later_runs),
            "tool_calls": self.calls,
            "tokens_by_call": dict(sorted(self.by_call.items())),
            **self.notes,
            "model_reads": self.model_reads.summary(later_runs),
            "overhead": self.model_reads.without_answers(value_tokens).summary(later_runs),
        }
