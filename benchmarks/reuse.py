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

Counted with the cl100k tokenizer of ``benchmarks/context.py``, as compact JSON: the
``tools/list`` result once per way (for PML: as listed after the first round, with the
named capabilities in it), and every ``tools/call`` as its request (``{name, arguments}``)
plus its result as the agent reads it (content, ``structuredContent``, ``isError``: both the
text and the structured copy are counted, for every way; the protocol's ``_meta`` and
``resultType`` are for the client and are not). Prints one JSON object
with the tokens of each way (``session`` = tools/list, ``first`` = first runs, ``repeat`` =
later runs, ``tokens_by_call``: per kind of call, ``pml_discover``, ``pml_execute``,
``capability_tool`` or ``upstream_tool``) and ``repeat_savings_vs_resend``: the share of
tokens the later runs save against re-sending the snippet (goal >= 0.90).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult, ListToolsResult, TextContent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from context import encoder, wire
from e2e.support import (  # the helpers that start real servers and PML live with the e2e tests
    Upstream,
    install_npm_deps,
    pml_stdio,
    reference_servers,
    result_json,
    write_config,
)
from paraphrase import ROOT_MARK, load_tasks, write_files

Json = dict[str, Any]


@dataclass
class Tally:
    """The tokens one way spends: tools/list once, first runs, later runs."""

    count: Callable[[object], int]
    session: int = 0
    first: int = 0
    repeat: int = 0
    calls: int = 0
    notes: dict[str, int] = field(default_factory=dict[str, int])
    by_call: dict[str, int] = field(default_factory=dict[str, int])

    def exchange(self, name: str, arguments: Json, result: CallToolResult, *, repeat: bool) -> None:
        tokens = self.count({"name": name, "arguments": arguments}) + self.count(read(result))
        self.calls += 1
        kind = name if name.startswith("pml_") else "capability_tool"
        kind = "upstream_tool" if "__" not in name and kind == "capability_tool" else kind
        self.by_call[kind] = self.by_call.get(kind, 0) + tokens
        if repeat:
            self.repeat += tokens
        else:
            self.first += tokens

    def summary(self, repeats: int) -> Json:
        return {
            "session_tokens": self.session,
            "first_tokens": self.first,
            "repeat_tokens": self.repeat,
            "total_tokens": self.session + self.first + self.repeat,
            "per_repeat_run": round(self.repeat / repeats, 1) if repeats else 0.0,
            "tool_calls": self.calls,
            "tokens_by_call": dict(sorted(self.by_call.items())),
            **self.notes,
        }


def read(result: CallToolResult | ListToolsResult) -> Json:
    """What the agent reads of a result: without the protocol's ``_meta`` and ``resultType``
    (for the client, not the model)."""
    exclude = {"meta", "result_type"}
    return result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=exclude)


def tool_name(display_name: str) -> str:
    """The MCP tool a named capability is listed as (``ns:action`` → ``mcp__ns__action``)."""
    namespace, action = display_name.split(":", 1)
    return f"mcp__{namespace}__{action}"


def phrasings(task: Json) -> list[str]:
    """The creation intent, then the other ways the task is asked for."""
    return [*task["intents"], *task["queries"]]


async def call(
    tally: Tally, client: Client, name: str, arguments: Json, *, repeat: bool
) -> CallToolResult:
    result = await client.call_tool(name, arguments)
    tally.exchange(name, arguments, result, repeat=repeat)
    if result.is_error:
        raise RuntimeError(f"{name} failed: {str(result.content)[:600]}")
    return result


async def list_tokens(tally: Tally, client: Client) -> None:
    listed = await client.list_tools()
    tally.session += tally.count(read(listed))


async def through_pml(
    client: Client, tasks: list[Json], codes: list[str], repeats: int, tally: Tally, *, ask: bool
) -> None:
    """Learn each task once (discover, then execute with a name), then reuse it."""
    for task, code in zip(tasks, codes, strict=True):
        intent = task["intents"][0]
        await call(tally, client, "pml_discover", {"intent": intent}, repeat=False)
        execute = {"intent": intent, "code": code, "name": task["name"]}
        await call(tally, client, "pml_execute", execute, repeat=False)
    await list_tokens(tally, client)  # what every later session reads: the named ones listed
    missed = 0
    for round_index in range(1, repeats):
        for task, code in zip(tasks, codes, strict=True):
            intent = phrasings(task)[round_index % len(phrasings(task))]
            name = tool_name(task["name"])
            if ask:
                found = await call(tally, client, "pml_discover", {"intent": intent}, repeat=True)
                named = [r.get("toolName") for r in result_json(found).get("results", [])]
                if name not in named:
                    missed += 1
                    resend = {"intent": intent, "code": code}
                    await call(tally, client, "pml_execute", resend, repeat=True)
                    continue
            await call(tally, client, name, {}, repeat=True)
    if ask:
        tally.notes["discover_misses"] = missed


async def resending(
    client: Client, tasks: list[Json], codes: list[str], repeats: int, tally: Tally
) -> None:
    await list_tokens(tally, client)
    for round_index in range(repeats):
        for task, code in zip(tasks, codes, strict=True):
            intent = phrasings(task)[round_index % len(phrasings(task))]
            arguments = {"intent": intent, "code": code}
            await call(tally, client, "pml_execute", arguments, repeat=round_index > 0)


class DirectTools:
    """``mcp.<server>.<tool>(**kw)`` for a snippet run by the agent itself: each call goes to
    the upstream server's own client and is counted; the value is what PML would hand the
    snippet (``structuredContent``, else the text as JSON, else the text)."""

    def __init__(self, clients: dict[str, Client], tally: Tally) -> None:
        self.clients = clients
        self.tally = tally
        self.repeat = False

    def __getattr__(self, server: str) -> Any:
        return _Server(self, server)

    async def invoke(self, server: str, tool: str, arguments: Json) -> Any:
        result = await call(self.tally, self.clients[server], tool, arguments, repeat=self.repeat)
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


async def directly(servers: list[Upstream], codes: list[str], repeats: int, tally: Tally) -> None:
    async with AsyncExitStack() as stack:
        clients = {
            server.name: await stack.enter_async_context(Client(server.params()))
            for server in servers
        }
        for client in clients.values():
            await list_tokens(tally, client)
        tools = DirectTools(clients, tally)
        for round_index in range(repeats):
            tools.repeat = round_index > 0
            for code in codes:
                await run_snippet(code, tools)


def spread(tasks: list[Json], distinct: int) -> list[Json]:
    """``distinct`` tasks taken evenly over the whole list."""
    return [tasks[index * len(tasks) // distinct] for index in range(distinct)]


async def run(options: argparse.Namespace) -> Json:
    files, every_task = load_tasks(50)
    tasks = spread(every_task, min(options.distinct, len(every_task)))
    encoding = encoder()

    def count(data: object) -> int:
        return len(encoding.encode(wire(data)))

    deps = install_npm_deps()
    tallies = {way: Tally(count) for way in ("pml_tool", "pml_discover", "resend", "direct")}
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
        await directly(upstream, codes, options.repeats, tallies["direct"])
    later_runs = len(tasks) * (options.repeats - 1)
    report = {way: tally.summary(later_runs) for way, tally in tallies.items()}
    resend = tallies["resend"]

    def saving(mine: int, theirs: int) -> float:
        return round(1 - mine / theirs, 4) if theirs else 0.0

    return {
        "tasks": len(tasks),
        "repeats": options.repeats,
        "runs": len(tasks) * options.repeats,
        "tokenizer": "cl100k_base",
        **report,
        "repeat_savings_vs_resend": {
            way: saving(tallies[way].repeat, resend.repeat) for way in ("pml_tool", "pml_discover")
        },
        "total_savings_vs_resend": {
            way: saving(report[way]["total_tokens"], report["resend"]["total_tokens"])
            for way in ("pml_tool", "pml_discover")
        },
        "total_savings_vs_direct": {
            way: saving(report[way]["total_tokens"], report["direct"]["total_tokens"])
            for way in ("pml_tool", "pml_discover")
        },
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
