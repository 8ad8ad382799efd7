"""Remembered intents through a real MCP client and gateway (SQLite file and PostgreSQL):
capture, reuse under other intents, paraphrases, calls by name, rename and new versions,
``cap_whois``/``cap_history``, secrets, hostile intents, tenants, and the announcement that
makes discovery re-read a capability."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import mcp_types
import pytest
import sqlalchemy as sa

from execution.conftest import SCOPE, Execute
from gateway.upstreams import Upstream, gateway_settings
from pml.errors import NotFound
from pml.gateway.schemas import ExecuteParams
from pml.gateway.server import Gateway, open_gateway
from pml.registry.changes import INTENTS_CHANGED, CapabilityChange
from pml.registry.intents import MAX_KEPT
from pml.registry.scope import Scope
from pml.registry.tools import CapTools
from pml.storage.intent_repo import capability_intents
from pml.upstream.pool import ClientPool
from samples import statements_sent

pytestmark = pytest.mark.anyio

ECHO = 'r = await mcp.a.echo(text="hello")\nreturn r["args"]["text"]'
OTHER_TENANT = Scope("globex", "webapp", "hank")
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
OPENAI_KEY = "sk-" + "proj4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N"


@pytest.fixture
async def gateway(database_url: str, upstreams: dict[str, Upstream]) -> AsyncGenerator[Gateway]:
    pool = ClientPool({name: upstream.server for name, upstream in upstreams.items()})
    async with open_gateway(gateway_settings(database_url, expose_upstream=False), pool=pool) as gw:
        yield gw


async def _tool(execute: Execute, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await execute.client.call_tool(name, arguments)
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    data = json.loads(block.text)
    assert not result.is_error, data
    return data


async def _intents(execute: Execute, fqdn: str) -> list[dict[str, Any]]:
    await execute.gateway.executor.flush()
    return (await _tool(execute, "cap_whois", {"fqdn": fqdn}))["intents"]


def _summary(intents: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(i["text"], i["source"], i["uses"]) for i in intents]


async def test_a_capture_remembers_its_intent(execute: Execute) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    intents = await _intents(execute, created["capabilityFqdn"])
    assert _summary(intents) == [("echo the greeting back", "capture", 1)]
    assert intents[0]["first_seen_at"] == intents[0]["last_seen_at"]
    assert set(intents[0]) == {"text", "source", "first_seen_at", "last_seen_at", "uses"}


async def test_the_same_code_under_another_intent_adds_it_and_a_paraphrase_counts_a_use(
    execute: Execute,
) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    again = await execute(code=ECHO, intent="count the words of a poem")
    assert again["capabilityFqdn"] == fqdn
    assert again["created"] is False
    intents = await _intents(execute, fqdn)
    assert _summary(intents) == [
        ("count the words of a poem", "reuse", 1),
        ("echo the greeting back", "capture", 1),
    ]
    # the same words in another order: the same meaning, a use of the kept one
    await execute(code=ECHO, intent="echo back the greeting")
    # the same text in another case and punctuation: the same intent
    await execute(code=ECHO, intent="Echo the greeting back!")
    intents = await _intents(execute, fqdn)
    assert _summary(intents) == [
        ("echo the greeting back", "capture", 3),
        ("count the words of a poem", "reuse", 1),
    ]
    assert intents[0]["last_seen_at"] > intents[0]["first_seen_at"]


async def test_the_same_intent_many_times_in_one_batch_counts_every_use(
    execute: Execute,
) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    for _ in range(4):  # all queued before the recorder writes
        await execute(code=ECHO, intent="say it again")
    intents = await _intents(execute, created["capabilityFqdn"])
    assert ("say it again", "reuse", 4) in _summary(intents)


async def test_intents_stay_bounded_under_many_different_ones(execute: Execute) -> None:
    topics = ["invoices", "weather", "tickets", "backups", "emails", "metrics", "users", "logs"]
    created = await execute(code=ECHO, intent="summarise the calendar")
    for topic in [*topics, "pull requests", "the garden"]:
        await execute(code=ECHO, intent=f"tell me about {topic}")
        await execute.gateway.executor.flush()
    intents = await _intents(execute, created["capabilityFqdn"])
    assert len(intents) == MAX_KEPT
    assert intents[0]["text"] == "tell me about the garden"
    record = await execute.record(created["capabilityFqdn"])
    assert record.intent == "summarise the calendar"  # the creation intent stays on the record


async def test_a_call_by_name_remembers_the_intent_it_states_a_tool_call_none(
    execute: Execute,
) -> None:
    created = await execute(code=ECHO, name="greet:echo", intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    await execute(capability="greet:echo", intent="say hello to the team")
    called = await execute.client.call_tool("mcp__greet__echo", {})
    assert not called.is_error
    intents = await _intents(execute, fqdn)
    assert _summary(intents) == [
        ("say hello to the team", "call", 1),
        ("echo the greeting back", "capture", 1),
    ]  # the tool call stated no intent


async def test_a_failed_call_by_name_remembers_nothing(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = 'return await mcp.a.echo(text=args["word"])'
    created = await execute(code=code, name="needs_word", args={"word": "w"}, intent="echo a word")
    error = await execute.error(capability="needs_word", intent="this one fails")
    assert error["code"] == "INVALID_ARGS"
    assert [i["text"] for i in await _intents(execute, created["capabilityFqdn"])] == [
        "echo a word"
    ]
    del upstreams


async def test_rename_and_new_versions_keep_intents_and_a_description_is_remembered(
    execute: Execute,
) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    await _tool(
        execute,
        "cap_rename",
        {"name": fqdn, "new_name": "greet:echo", "description": "Repeats a greeting to its sender"},
    )
    await execute(
        code=ECHO.replace("hello", "bonjour"),
        name="greet:echo",
        update=True,
        intent="echo a french greeting",
    )
    await execute(capability="greet:echo", intent="greet in french")
    intents = await _intents(execute, fqdn)
    assert {(i["text"], i["source"]) for i in intents} == {
        ("echo the greeting back", "capture"),
        ("Repeats a greeting to its sender", "rename"),
        ("echo a french greeting", "update"),
        ("greet in french", "call"),
    }
    history = await _tool(execute, "cap_history", {"name": "greet:echo"})
    assert [v["version"] for v in history["versions"]] == [2, 1]
    assert history["intents"] == intents
    # an alias (the old name) leads to the same intents
    old = await _tool(execute, "cap_history", {"name": created["capabilityName"]})
    assert old["intents"] == intents


async def test_curation_keeps_the_intents(execute: Execute) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    await execute(code=ECHO, intent="repeat hello")
    before = await _intents(execute, fqdn)
    answer = await _tool(
        execute, "cap_curate", {"mode": "apply", "renames": [{"id": fqdn, "name": "greet:hello"}]}
    )
    assert answer
    after = await _intents(execute, fqdn)
    assert after == before
    assert (await execute.record(fqdn)).display_name == "greet:hello"


@pytest.mark.parametrize("secret", [GITHUB_TOKEN, OPENAI_KEY, AWS_KEY, JWT])
async def test_a_secret_in_an_intent_is_never_stored(execute: Execute, secret: str) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    await execute(code=ECHO, intent=f"echo hello using token {secret} for auth")
    await execute(capability=fqdn, intent=f"call it with {secret}")
    await _tool(execute, "cap_rename", {"name": fqdn, "description": f"uses key {secret}"})
    intents = await _intents(execute, fqdn)
    assert len(intents) == 4
    assert all(secret[:10] not in i["text"] for i in intents)
    assert "echo hello using token [REDACTED] for auth" in [i["text"] for i in intents]
    async with execute.gateway.db.read() as conn:
        stored = (await conn.execute(sa.select(capability_intents.c.text))).scalars().all()
    assert all(secret[:10] not in text for text in stored)
    description = (await execute.record(fqdn)).description
    assert description == "uses key [REDACTED]"


async def test_hostile_intents_are_stored_bounded_and_harmless(execute: Execute) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    hostile = [
        "weather report " * 666,  # 9 990 characters (10 000 is the schema's limit)
        "read\x07the\x1bfile\u2028",
        "'; DROP TABLE capability_intents; --",
        "lire le fichier 📄 — 日本語のファイルを読む",
    ]
    for intent in hostile:
        answer = await execute(code=ECHO, intent=intent)
        assert answer["status"] == "success"
    refused = await execute.error(code=ECHO, intent="read\x00the\x00file")  # NUL: refused
    assert refused["code"] == "INVALID_INPUT"
    texts = [i["text"] for i in await _intents(execute, fqdn)]
    assert len(texts) == 5
    assert all(len(text) <= 500 for text in texts)
    assert "read the file" in texts
    assert "'; DROP TABLE capability_intents; --" in texts
    assert "lire le fichier 📄 — 日本語のファイルを読む" in texts


async def test_another_tenant_never_sees_the_intents(execute: Execute) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back for acme")
    fqdn = created["capabilityFqdn"]
    executor = execute.gateway.executor
    theirs = await executor.execute(
        OTHER_TENANT, ExecuteParams(intent="globex greeting echo", code=ECHO)
    )
    await executor.flush()
    tools = CapTools(execute.gateway.registry)
    with pytest.raises(NotFound):
        await tools.whois(OTHER_TENANT, {"fqdn": fqdn})
    with pytest.raises(NotFound):
        await tools.history(OTHER_TENANT, {"name": fqdn})
    their_intents = (await tools.whois(OTHER_TENANT, {"fqdn": theirs["capabilityFqdn"]}))["intents"]
    assert [i["text"] for i in their_intents] == ["globex greeting echo"]
    assert [i["text"] for i in await _intents(execute, fqdn)] == ["echo the greeting back for acme"]


async def test_a_new_intent_is_announced_so_discovery_re_reads_it(execute: Execute) -> None:
    heard: list[CapabilityChange] = []

    async def listen(change: CapabilityChange) -> None:
        heard.append(change)

    execute.gateway.registry.on_change(listen)
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    await execute.gateway.executor.flush()
    await execute(code=ECHO, intent="count the words of a poem")
    await execute.gateway.executor.flush()
    await execute(code=ECHO, intent="count the words of a poem")  # a use: not a change
    await execute.gateway.executor.flush()
    announced = [c for c in heard if c.kind == INTENTS_CHANGED]
    assert [(c.org, c.project, c.fqdn) for c in announced] == [
        (SCOPE.org, SCOPE.project, fqdn),
        (SCOPE.org, SCOPE.project, fqdn),
    ]


async def test_the_intents_of_one_batched_write_are_announced_with_one_notify(
    execute: Execute,
) -> None:
    heard: list[CapabilityChange] = []

    async def listen(change: CapabilityChange) -> None:
        heard.append(change)

    execute.gateway.registry.on_change(listen)
    fqdns = [
        (await execute(code=f"return {n} + 1", intent=f"add one to {n} for the report"))[
            "capabilityFqdn"
        ]
        for n in range(3)
    ]
    with statements_sent(execute.gateway.db.engine.sync_engine) as statements:
        await execute.gateway.executor.flush()
    announced = sorted(c.fqdn for c in heard if c.kind == INTENTS_CHANGED)
    assert announced == sorted(fqdns)
    notifies = [s for s in statements if "pg_notify" in s]
    expected = 1 if execute.gateway.db.dialect == "postgresql" else 0
    assert len(notifies) == expected, statements


async def test_the_answer_of_a_reuse_waits_for_no_intent_write(execute: Execute) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    await execute.gateway.executor.flush()
    answer = await execute(code=ECHO, intent="a brand new way to ask")
    assert answer["created"] is False
    async with execute.gateway.db.read() as conn:  # queued, not yet written
        texts = (await conn.execute(sa.select(capability_intents.c.text))).scalars().all()
    assert "a brand new way to ask" not in texts
    assert "a brand new way to ask" in [
        i["text"] for i in await _intents(execute, created["capabilityFqdn"])
    ]


async def test_cap_whois_of_an_mcp_server_record_has_no_intents(execute: Execute) -> None:
    fqdn = (await _tool(execute, "cap_lookup", {"name": "mcp:filesystem"}))["fqdn"]
    assert (await _tool(execute, "cap_whois", {"fqdn": fqdn}))["intents"] == []


async def test_pml_discover_finds_a_capability_by_an_intent_it_learned_later(
    execute: Execute,
) -> None:
    created = await execute(code=ECHO, intent="echo the greeting back")
    fqdn = created["capabilityFqdn"]
    # a close distractor: before the echo capability learns the request, this one wins
    await execute(code="return 41 + 1", intent="translate a german letter into french")
    query = {"intent": "translate a french invoice into english", "kind": "capability"}
    before = await _tool(execute, "pml_discover", query)
    assert before["results"][0]["name"] not in {created["capabilityName"], fqdn}
    await execute(code=ECHO, intent="translate a french invoice into english")
    await execute.gateway.executor.flush()  # written and announced: discovery re-reads it
    after = await _tool(execute, "pml_discover", query)
    assert after["results"][0]["name"] in {created["capabilityName"], fqdn}
