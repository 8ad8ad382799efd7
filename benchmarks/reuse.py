"""Tokens an agent exchanges for recurring tasks: reuse through PML versus the alternatives.

    python benchmarks/reuse.py [--distinct 20] [--repeats 5]

``distinct`` tasks of ``data/paraphrase_tasks.json`` (spread over all of them: logs, CSVs,
config, notes, code, folders, time zones), each done ``repeats`` times (20 x 5 = 100 runs),
against the real filesystem and time reference servers, four ways:

- ``pml_tool``: a real ``pml serve --stdio`` (SQLite in a temporary folder) and the SDK
  client. The first time, ``pml_discover`` then ``pml_execute {intent, code, name}``; later
  times the named capability is called as the tool ``tools/list`` shows
  (``mcp__<ns>__<action>``);
- ``pml_discover``: the same, but later times ask ``pml_discover`` with another phrasing
  first and call the tool it names (a miss falls back to sending the code again);
- ``resend``: another gateway on its own database; every time ``pml_execute {intent, code}``
  with the whole snippet;
- ``direct``: SDK clients on the upstream servers themselves, no PML; the agent reads every
  upstream tool's schema and calls the tools the snippet calls, one by one (the snippet's
  own computing is left to the agent and not counted, which favours this way).

Counted with the cl100k tokenizer of ``benchmarks/context.py``, in three accountings side by side,
each applied identically to every way (``session`` = the ``tools/list`` result once per way, as
compact JSON; for PML as listed after the first round, with the named capabilities in it):

- ``wire`` (the top-level figures of each way): every ``tools/call`` as its request
  (``{name, arguments}``, compact JSON) plus its whole result as it crosses the wire (content,
  ``structuredContent``, ``isError``: the text and the structured copy of the same JSON are
  both counted; the protocol's ``_meta`` and ``resultType`` are for the client and are not);
- ``model_reads``: what MCP clients give the model: the request it wrote (``{name,
  arguments}``) and, of each result, the content blocks (a text block as its text, another
  block as its JSON), ``structuredContent`` only when a result has no content. The MCP
  specification makes the text copy of a structured result the backwards-compatible form that
  clients hand to the model; the structured copy is for programs;
- ``overhead``: ``model_reads`` less each run's own answer, i.e. what a way costs beyond the
  value the agent needs anyway. The answer is the value the task's snippet returns (taken from
  the ``direct`` runs, the same whichever way the task is done; only the time tasks' clock
  moves between ways), counted once per run as compact JSON and subtracted from every way's
  tokens for that run, never below zero. ``direct`` never reads its answer (the agent computes
  it, uncounted), which favours it once more.

Prints one JSON object: ``answer_tokens`` (first and later runs), then for each way its
``wire`` figures (``session`` = tools/list, ``first`` = first runs, ``repeat`` = later runs,
``tokens_by_call``: per kind of call, ``pml_discover``, ``pml_execute``, ``capability_tool``
or ``upstream_tool``) with the same figures nested under ``model_reads`` and ``overhead``;
``repeat_savings_vs_resend`` (the share of tokens the later runs save against re-sending the
snippet, goal >= 0.90), ``total_savings_vs_resend`` and ``total_savings_vs_direct`` in the
``wire`` accounting, and each of the three per accounting under ``..._by_accounting``
(``wire``, ``model_reads``, ``overhead``) for ``pml_tool`` and ``pml_discover``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult, TextContent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from context import encoder
from e2e.support import (  # the helpers that start real servers and PML live with the e2e tests
    Upstream,
    install_npm_deps,
    pml_stdio,
    reference_servers,
    result_json,
    write_config,
)
from paraphrase import ROOT_MARK, load_tasks, write_files
from reuse_tally import Json, Run, Tally, wire


def tool_name(display_name: str) -> str:
    """The MCP tool a named capability is listed as (``ns:action`` → ``mcp__ns__action``)."""
    namespace, action = display_name.split(":", 1)
    return f"mcp__{namespace}__{action}"


def phrasings(task: Json) -> list[str]:
    """The creation intent, then the other ways the task is asked for."""
    return [*task["intents"], *task["queries"]]


async def call(
    tally: Tally, client: Client, name: str, arguments: Json, *, run: Run
) -> CallToolResult:
    result = await client.call_tool(name, arguments)
    tally.exchange(name, arguments, result, run=run)
    if result.is_error:
        raise RuntimeError(f"{name} failed: {str(result.content)[:600]}")
    return result


async def list_tokens(tally: Tally, client: Client) -> None:
    tally.listed(await client.list_tools())


async def through_pml(
    client: Client, tasks: list[Json], codes: list[str], repeats: int, tally: Tally, *, ask: bool
) -> None:
    """Learn each task once (discover, then execute with a name), then reuse it."""
    for index, (task, code) in enumerate(zip(tasks, codes, strict=True)):
        intent = task["intents"][0]
        await call(tally, client, "pml_discover", {"intent": intent}, run=(0, index))
        execute = {"intent": intent, "code": code, "name": task["name"]}
        await call(tally, client, "pml_execute", execute, run=(0, index))
    await list_tokens(tally, client)  # what every later session reads: the named ones listed
    missed = 0
    for round_index in range(1, repeats):
        for index, (task, code) in enumerate(zip(tasks, codes, strict=True)):
            intent = phrasings(task)[round_index % len(phrasings(task))]
            name = tool_name(task["name"])
            run = (round_index, index)
            if ask:
                found = await call(tally, client, "pml_discover", {"intent": intent}, run=run)
                named = [r.get("toolName") for r in result_json(found).get("results", [])]
                if name not in named:
                    missed += 1
                    resend = {"intent": intent, "code": code}
                    await call(tally, client, "pml_execute", resend, run=run)
                    continue
            await call(tally, client, name, {}, run=run)
    if ask:
        tally.notes["discover_misses"] = missed


async def resending(
    client: Client, tasks: list[Json], codes: list[str], repeats: int, tally: Tally
) -> None:
    await list_tokens(tally, client)
    for round_index in range(repeats):
        for index, (task, code) in enumerate(zip(tasks, codes, strict=True)):
            intent = phrasings(task)[round_index % len(phrasings(task))]
            arguments = {"intent": intent, "code": code}
            await call(tally, client, "pml_execute", arguments, run=(round_index, index))


class DirectTools:
    """``mcp.<server>.<tool>(**kw)`` for a snippet run by the agent itself: each call goes to
    the upstream server's own client and is counted; the value is what PML would hand the
    snippet (``structuredContent``, else the text as JSON, else the text)."""

    def __init__(self, clients: dict[str, Client], tally: Tally) -> None:
        self.clients = clients
        self.tally = tally
        self.run: Run = (0, 0)

    def __getattr__(self, server: str) -> Any:
        return _Server(self, server)

    async def invoke(self, server: str, tool: str, arguments: Json) -> Any:
        result = await call(self.tally, self.clients[server], tool, arguments, run=self.run)
        if result.structured_content is not None:
            return result.structured_content
        texts = [block.text for block in result.content if isinstance(block, TextContent)]
        try:
            return json.loads(texts[0])
        except ValueError:
            return texts[0]


class _Server:
    def __init__(self, tools: DirectTools, server: str) -> None:
        self.tools = tools
        self.server = server

    def __getattr__(self, tool: str) -> Callable[..., Any]:
        async def invoke(**arguments: Any) -> Any:
            return await self.tools.invoke(self.server, tool, arguments)

        return invoke


async def run_snippet(code: str, tools: DirectTools) -> Any:
    """Run a task's snippet in this process (the tasks file is ours), its tool calls direct."""
    source = "async def _task(mcp, args):\n" + textwrap.indent(code, "    ")
    namespace: dict[str, Any] = {}
    exec(compile(source, "<task>", "exec"), namespace)  # our own task file, not input
    return await namespace["_task"](tools, {})


async def directly(
    servers: list[Upstream], codes: list[str], repeats: int, tally: Tally
) -> dict[Run, object]:
    """Every run done by the agent with the upstream clients; returns each run's answer."""
    answers: dict[Run, object] = {}
    async with AsyncExitStack() as stack:
        clients = {
            server.name: await stack.enter_async_context(Client(server.params()))
            for server in servers
        }
        for client in clients.values():
            await list_tokens(tally, client)
        tools = DirectTools(clients, tally)
        for round_index in range(repeats):
            for index, code in enumerate(codes):
                tools.run = (round_index, index)
                answers[tools.run] = await run_snippet(code, tools)
    return answers


def spread(tasks: list[Json], distinct: int) -> list[Json]:
    """``distinct`` tasks taken evenly over the whole list."""
    return [tasks[index * len(tasks) // distinct] for index in range(distinct)]


async def run(options: argparse.Namespace) -> Json:
    files, every_task = load_tasks(50)
    tasks = spread(every_task, min(options.distinct, len(every_task)))
    encoding = encoder()

    def tokens(text: str) -> int:
        return len(encoding.encode(text))

    deps = install_npm_deps()
    tallies = {way: Tally(tokens) for way in ("pml_tool", "pml_discover", "resend", "direct")}
    with tempfile.TemporaryDirectory(prefix="pml-reuse-") as tmp:
        workdir = Path(tmp)
        servers = reference_servers(deps, workdir)
        root = workdir / "files"
        write_files(root, files)
        codes = [task["code"].replace(ROOT_MARK, str(root)) for task in tasks]
        upstream = [servers["filesystem"], servers["time"]]
        for way in ("pml_tool", "pml_discover", "resend"):
            config = write_config(
                workdir / f"{way}.toml",
                upstream,
                database_url=f"sqlite:///{workdir / way}.db",
                expose_upstream=False,
                # tokens are measured, not the gate: the policy audits instead of refusing
                extra={"permissions": {"allow": ["*:*"]}, "policy": {"mode": "audit"}},
            )
            async with pml_stdio(config, workdir / f"{way}.log") as gateway:
                if way == "resend":
                    await resending(gateway.client, tasks, codes, options.repeats, tallies[way])
                else:
                    ask = way == "pml_discover"
                    await through_pml(
                        gateway.client, tasks, codes, options.repeats, tallies[way], ask=ask
                    )
        answers = await directly(upstream, codes, options.repeats, tallies["direct"])
    answer_tokens = {run: tokens(wire(answer)) for run, answer in answers.items()}
    later_runs = len(tasks) * (options.repeats - 1)
    report = {way: tally.summary(later_runs, answer_tokens) for way, tally in tallies.items()}
    repeated = sum(count for (round_index, _), count in answer_tokens.items() if round_index)
    return {
        "tasks": len(tasks),
        "repeats": options.repeats,
        "runs": len(tasks) * options.repeats,
        "tokenizer": "cl100k_base",
        "answer_tokens": {"first": sum(answer_tokens.values()) - repeated, "repeat": repeated},
        **report,
        "repeat_savings_vs_resend": savings(report, "repeat_tokens", "resend")["wire"],
        "total_savings_vs_resend": savings(report, "total_tokens", "resend")["wire"],
        "total_savings_vs_direct": savings(report, "total_tokens", "direct")["wire"],
        "repeat_savings_vs_resend_by_accounting": savings(report, "repeat_tokens", "resend"),
        "total_savings_vs_resend_by_accounting": savings(report, "total_tokens", "resend"),
        "total_savings_vs_direct_by_accounting": savings(report, "total_tokens", "direct"),
    }


def savings(report: dict[str, Json], figure: str, against: str) -> dict[str, dict[str, float]]:
    """``1 - mine / theirs`` of one figure, per accounting, for the two ways through PML."""

    def value(way: str, accounting: str) -> int:
        figures = report[way] if accounting == "wire" else report[way][accounting]
        return figures[figure]

    return {
        accounting: {
            way: round(1 - value(way, accounting) / value(against, accounting), 4)
            if value(against, accounting)
            else 0.0
            for way in ("pml_tool", "pml_discover")
        }
        for accounting in ("wire", "model_reads", "overhead")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Tokens for recurring tasks, four ways")
    parser.add_argument("--distinct", type=int, default=20, help="distinct tasks (max 50)")
    parser.add_argument("--repeats", type=int, default=5, help="times each task is done")
    options = parser.parse_args()
    if options.distinct < 1 or options.repeats < 2:
        parser.error("--distinct must be at least 1 and --repeats at least 2")
    print(json.dumps(anyio.run(run, options)))


if __name__ == "__main__":
    main()
