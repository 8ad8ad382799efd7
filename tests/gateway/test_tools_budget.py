"""Named capabilities in ``tools/list`` within ``[gateway] capability_tools_budget`` (SPEC §6.6).

Real gateways over SQLite files, real SDK clients; token counts with the real cl100k
tokenizer (``tiktoken``, a development dependency; the gateway itself only estimates).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import tiktoken
from mcp import Client

from gateway.tools_budget_bench import encoder
from gateway.upstreams import ListChanged, data_of, error_of, gateway_settings
from pml.config import Settings, load_settings
from pml.errors import ConfigError
from pml.gateway.capability_tools import DEFAULT_BUDGET
from pml.gateway.schemas import STATIC_WIRE
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.tools_budget import estimate_tokens
from pml.registry.names import tool_name_for
from pml.registry.records import blank_record
from pml.registry.scope import Scope
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.types import utc_now
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    return encoder()


@dataclass(frozen=True, slots=True)
class Cap:
    """A named capability to write straight to the registry's table."""

    action: str
    usage: int = 0
    last_used: datetime | None = None
    intent: str | None = None


async def insert(gateway: Gateway, caps: Sequence[Cap], namespace: str = "bulk") -> None:
    """``caps`` as named capabilities of SCOPE (``return {"n": <action>}``), one transaction."""
    now = utc_now()
    async with gateway.db.transaction() as conn:
        repo = SqlCapabilityRepository(conn)
        for index, cap in enumerate(caps):
            code = f'return {{"n": "{cap.action}"}}'
            record = replace(
                blank_record(SCOPE, f"acme.webapp.{namespace}.{cap.action}.{index:04x}", now),
                display_name=f"{namespace}:{cap.action}",
                named=True,
                tool_name=tool_name_for(namespace, cap.action),
                code=code,
                code_hash=hashlib.sha256(code.encode()).hexdigest(),
                intent=cap.intent or f"bulk capability {cap.action}",
                parameters_schema=dict(EMPTY_SCHEMA),
                usage_count=cap.usage,
                success_count=cap.usage,
                last_used_at=cap.last_used,
            )
            await repo.insert_record(record)
    await gateway.watcher.project_changed(SCOPE.org, SCOPE.project)  # behind the registry


async def insert_before(sqlite_url: str, caps: Sequence[Cap]) -> None:
    """``caps`` written before the gateway under test opens (its change poll starts past
    them: a poll catching them later would re-list at a moment the test does not choose)."""
    async with open_gateway(settings_with(sqlite_url, DEFAULT_BUDGET), pool=ClientPool({})) as gw:
        await insert(gw, caps)


def settings_with(sqlite_url: str, budget: int) -> Settings:
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    settings.gateway.capability_tools_budget = budget
    settings.discovery.embedder = "hashing"  # thousands of capabilities embed fast
    return settings


@pytest.fixture
def open_with(sqlite_url: str, pool: ClientPool) -> Any:
    """``async with open_with(budget) as gateway``: a gateway with that budget."""

    def opener(budget: int) -> Any:
        return open_gateway(settings_with(sqlite_url, budget), pool=pool)

    return opener


def capability_tools(tools: Sequence[Any]) -> list[str]:
    return [tool.name for tool in tools if tool.name.startswith("mcp__")]


async def listed_wire(gateway: Gateway) -> list[str]:
    """The capability tools of SCOPE's tools/list, as the JSON text sent (stdio lane)."""
    items, _ = await gateway.tools.list_page_json(SCOPE, None)
    return [text for text in items if text not in STATIC_WIRE]


# -- PML's own tools -----------------------------------------------------------------------


async def test_pml_own_tools_cost_at_most_1000_tokens_with_the_real_tokenizer(
    cl100k: tiktoken.Encoding,
) -> None:
    listed = "[" + ",".join(STATIC_WIRE) + "]"
    assert len(cl100k.encode('{"tools":' + listed + "}")) <= 1000
    assert len(STATIC_WIRE) == 8


# -- the budget ----------------------------------------------------------------------------


async def test_most_used_then_most_recent_then_by_name_come_first(
    database_url: str, pool: ClientPool
) -> None:
    async with open_gateway(settings_with(database_url, 100_000), pool=pool) as gateway:
        now = utc_now()
        await insert(
            gateway,
            [
                Cap("never_b"),
                Cap("five_old", 5, now - timedelta(days=3)),
                Cap("nine", 9, now - timedelta(days=30)),
                Cap("never_a"),
                Cap("five_new", 5, now - timedelta(minutes=1)),
            ],
        )
        async with Client(gateway.server, mode="legacy") as client:
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
        assert listed == [
            "mcp__bulk__nine",
            "mcp__bulk__five_new",
            "mcp__bulk__five_old",
            "mcp__bulk__never_a",
            "mcp__bulk__never_b",
        ]


async def test_only_what_fits_the_budget_is_listed_and_the_real_count_agrees(
    open_with: Any, cl100k: tiktoken.Encoding
) -> None:
    one = estimate_tokens(
        json.dumps(
            {
                "name": "mcp__bulk__c0",
                "description": "bulk capability c0 (PML capability bulk:c0)",
                "inputSchema": EMPTY_SCHEMA,
            },
            separators=(",", ":"),
        )
    )
    async with open_with(2 * (one + 1) + one // 2) as gateway:  # two fit, not three
        await insert(gateway, [Cap(f"c{i}", usage=10 - i) for i in range(6)])
        wire = await listed_wire(gateway)
        assert [json.loads(text)["name"] for text in wire] == ["mcp__bulk__c0", "mcp__bulk__c1"]
        assert len(cl100k.encode(",".join(wire))) <= 2 * (one + 1) + one // 2
        listing = await gateway.catalog.listing(SCOPE)
        assert listing.truncated
        assert listing.estimated_tokens <= gateway.catalog.budget


async def test_thousands_of_named_capabilities_stay_within_the_default_budget(
    open_with: Any, cl100k: tiktoken.Encoding
) -> None:
    async with open_with(DEFAULT_BUDGET) as gateway:
        now = utc_now()
        caps = [
            Cap(f"tool_{i:04d}", usage=(i * 7919) % 500, last_used=now - timedelta(seconds=i))
            for i in range(3000)
        ]
        await insert(gateway, caps)
        async with Client(gateway.server, mode="legacy") as client:
            with anyio.fail_after(30):
                tools = (await client.list_tools(cache_mode="bypass")).tools
        listed = capability_tools(tools)
        everything = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        capability_json = [t for t in everything if t["name"].startswith("mcp__")]
        wire = json.dumps({"tools": capability_json}, separators=(",", ":"), ensure_ascii=False)
        assert len(cl100k.encode(wire)) <= DEFAULT_BUDGET
        total = json.dumps({"tools": everything}, separators=(",", ":"), ensure_ascii=False)
        assert len(cl100k.encode(total)) <= 6000
        ranked = sorted(caps, key=lambda c: (-c.usage, -(c.last_used or now).timestamp(), c.action))
        assert 20 < len(listed) < 3000
        assert listed == [f"mcp__bulk__{cap.action}" for cap in ranked[: len(listed)]]


async def test_a_zero_budget_lists_no_capability_and_all_stay_callable(open_with: Any) -> None:
    async with open_with(0) as gateway:
        await insert(gateway, [Cap("only", usage=100)])
        async with Client(gateway.server, mode="legacy") as client:
            tools = (await client.list_tools(cache_mode="bypass")).tools
            called = await client.call_tool("mcp__bulk__only", {})
        assert capability_tools(tools) == []
        assert len(tools) == 8
        assert data_of(called) == {"n": "only"}


async def test_a_capability_beyond_the_budget_is_called_by_name_run_by_name_and_discovered(
    open_with: Any,
) -> None:
    async with open_with(300) as gateway:
        await insert(gateway, [Cap(f"busy_{i}", usage=50 + i) for i in range(40)])
        await insert(
            gateway,
            [Cap("fahrenheit", intent="convert fahrenheit temperatures to celsius degrees")],
            namespace="temps",
        )
        await gateway.discovery.refresh(force=True)
        async with Client(gateway.server, mode="legacy") as client:
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
            as_tool = await client.call_tool("mcp__temps__fahrenheit", {})
            by_name = await client.call_tool(
                "pml_execute", {"intent": "convert", "capability": "temps:fahrenheit"}
            )
            found = await client.call_tool(
                "pml_discover",
                {"intent": "convert fahrenheit temperatures to celsius", "kind": "capability"},
            )
            unknown = await client.call_tool("mcp__temps__kelvin", {})
        assert "mcp__temps__fahrenheit" not in listed
        assert 0 < len(listed) < 40
        assert data_of(as_tool) == {"n": "fahrenheit"}
        assert as_tool.meta is not None
        assert "deprecatedAlias" not in as_tool.meta["pml/capability"]  # its own name, not an alias
        assert data_of(by_name)["result"] == {"n": "fahrenheit"}
        results = data_of(found)["results"]
        assert results[0]["name"] == "temps:fahrenheit"
        assert results[0]["toolName"] == "mcp__temps__fahrenheit"
        assert error_of(unknown)["message"].startswith("Capability not found")


# -- list_changed ----------------------------------------------------------------------------


async def runs(client: Client, name: str, count: int) -> None:
    for _ in range(count):
        data_of(await client.call_tool("pml_execute", {"intent": "run", "capability": name}))


async def settled(client: Client) -> None:
    """Past any notification the gateway sent so far (a round trip, then a moment)."""
    await client.list_tools(cache_mode="bypass")
    await anyio.sleep(0.3)


async def test_list_changed_is_sent_when_usage_changes_the_listed_set_and_not_otherwise(
    open_with: Any, sqlite_url: str
) -> None:
    one = estimate_tokens(
        json.dumps(
            {
                "name": "mcp__bulk__xx",
                "description": "bulk capability xx (PML capability bulk:xx)",
                "inputSchema": EMPTY_SCHEMA,
            },
            separators=(",", ":"),
        )
    )
    await insert_before(sqlite_url, [Cap("aa", usage=10), Cap("bb", usage=9), Cap("zz", usage=0)])
    async with open_with(2 * (one + 1)) as gateway:  # two fit
        changed = ListChanged()
        async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
            assert listed == ["mcp__bulk__aa", "mcp__bulk__bb"]
            await runs(client, "bulk:aa", 3)  # more use of a listed one: same set
            await gateway.executor.flush()
            await gateway.watcher.rerank()
            await settled(client)
            assert changed.count == 0
            await runs(client, "bulk:zz", 20)  # never per call ...
            await settled(client)
            assert changed.count == 0
            await gateway.executor.flush()
            await gateway.watcher.rerank()  # ... but once usage stats are refreshed
            await changed.wait()
            assert changed.count == 1
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
            assert listed == ["mcp__bulk__zz", "mcp__bulk__aa"]
            await gateway.watcher.rerank()  # nothing new: nothing said
            await settled(client)
        assert changed.count == 1


async def test_a_new_name_that_stays_beyond_the_budget_is_not_announced(
    open_with: Any,
) -> None:
    async with open_with(200) as gateway:
        await insert(gateway, [Cap(f"busy_{i}", usage=50) for i in range(30)])
        changed = ListChanged()
        async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
            before = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
            await insert(gateway, [Cap("newcomer", usage=0)], namespace="late")
            await settled(client)
            after = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
        assert before == after
        assert "mcp__late__newcomer" not in after
        assert changed.count == 0


async def test_the_watcher_re_ranks_by_itself_when_usage_stats_are_refreshed(
    sqlite_url: str, pool: ClientPool
) -> None:
    one = estimate_tokens(
        '{"name":"mcp__bulk__xx","description":"bulk capability xx (PML capability bulk:xx)",'
        '"inputSchema":{"type":"object","properties":{}}}'
    )
    async with open_gateway(settings_with(sqlite_url, one + 1), pool=pool) as gateway:
        gateway.watcher._rerank_interval_s = 0.2  # pyright: ignore[reportPrivateUsage]
        await insert(gateway, [Cap("aa", usage=10), Cap("bb", usage=0)])
        changed = ListChanged()
        async with Client(gateway.server, mode="legacy", message_handler=changed) as client:
            assert capability_tools((await client.list_tools()).tools) == ["mcp__bulk__aa"]
            await runs(client, "bulk:bb", 11)
            await gateway.executor.flush()
            await changed.wait(timeout_s=45)  # the watcher's own round (30 s by default)
            listed = capability_tools((await client.list_tools(cache_mode="bypass")).tools)
    assert listed == ["mcp__bulk__bb"]


# -- the setting -----------------------------------------------------------------------------


def test_the_default_budget_is_the_catalog_default_and_fits_the_goal() -> None:
    assert Settings().gateway.capability_tools_budget == DEFAULT_BUDGET == 4500


@pytest.mark.parametrize(
    "value",
    [
        "-1",
        "true",
        "3.5",
        "4500.0",
        "1e3",
        "9223372036854775807",
        "[1]",
        "{a = 1}",
        '"abc"',
        '"١٢"',
        '"4500; DROP TABLE capability_records"',
        '""',
    ],
)
def test_hostile_budget_values_in_the_file_are_config_errors(tmp_path: Path, value: str) -> None:
    path = tmp_path / "pml.toml"
    path.write_text(f"[gateway]\ncapability_tools_budget = {value}\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={}, cwd=tmp_path)
    assert raised.value.code == "CONFIG_ERROR"
    assert "capability_tools_budget" in raised.value.message


@pytest.mark.parametrize("value", ["-5", "", "1e3", "x" * 10_000, "4 500", "0x10", "\x00"])
def test_hostile_budget_values_in_the_environment_are_config_errors(
    tmp_path: Path, value: str
) -> None:
    environ = {"PML_GATEWAY__CAPABILITY_TOOLS_BUDGET": value}
    with pytest.raises(ConfigError):
        load_settings(None, environ=environ, cwd=tmp_path)


def test_an_unknown_gateway_key_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "pml.toml"
    path.write_text("[gateway]\ncapability_tool_budget = 100\n")  # a typo
    with pytest.raises(ConfigError):
        load_settings(path, environ={}, cwd=tmp_path)


@pytest.mark.parametrize(("written", "value"), [("0", 0), ("1000000", 1_000_000), ("12", 12)])
def test_budget_values_within_bounds_are_taken(tmp_path: Path, written: str, value: int) -> None:
    path = tmp_path / "pml.toml"
    path.write_text(f"[gateway]\ncapability_tools_budget = {written}\n")
    assert load_settings(path, environ={}, cwd=tmp_path).gateway.capability_tools_budget == value
    from_env = load_settings(
        None, environ={"PML_GATEWAY__CAPABILITY_TOOLS_BUDGET": written}, cwd=tmp_path
    )
    assert from_env.gateway.capability_tools_budget == value
