"""The query embedding lane through a real gateway (the installed model, SDK clients over
streamable HTTP with two tenants' API keys): a flooding tenant is ``BUSY`` past its queue
and another tenant's ``pml_discover`` is answered before the flood's queue; hostile
intents are refused at the edge or answered, and leave the lane idle."""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.upstreams import Upstream, data_of, error_of, gateway_settings
from pml.discovery.embed_lane import QUERY_MAX_CHARS, QUEUE_PER_TENANT, query_lane
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

BLOCKER = ("blocker-org", "web", "ops")
FLOOD = ("flood-org", "web", "mallory")
VICTIM = ("quiet-org", "web", "bob")
WAIT_S = 30.0
WORDS = ("read", "the", "error", "log", "file", "count", "lines", "list", "commits", "branch")


@pytest.fixture
async def gateway(sqlite_url: str) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    async with open_gateway(settings, pool=ClientPool({"a": Upstream("a").server})) as gw:
        yield gw


@asynccontextmanager
async def client(url: str, key: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as connected,
    ):
        yield connected


async def until(check: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT_S):
        while not check():
            await anyio.lowlevel.checkpoint()


def intent(seed: int, chars: int = 10_000) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(chars))[:chars]


async def test_a_flood_is_busy_past_its_queue_and_another_tenant_goes_before_it(
    gateway: Gateway,
) -> None:
    lane = query_lane()  # the gateway's: it serves on this event loop
    held = threading.Event()
    answers: list[str] = []
    refused: list[dict[str, Any]] = []
    async with running_http(gateway) as url:
        keys = ApiKeys(gateway.db)
        flood_key = (await keys.create(FLOOD[0], FLOOD[1], user=FLOOD[2]))[0]
        victim_key = (await keys.create(VICTIM[0], VICTIM[1], user=VICTIM[2]))[0]
        async with client(url, flood_key) as flood, client(url, victim_key) as victim:
            data_of(await flood.call_tool("pml_discover", {"intent": "warm up the model"}))

            async def ask(who: Client, name: str, text: str) -> None:
                result = await who.call_tool("pml_discover", {"intent": text})
                if result.is_error:
                    refused.append(error_of(result))
                else:
                    assert data_of(result)["results"]
                    answers.append(name)

            async with anyio.create_task_group() as group:
                for _ in range(lane.slots):  # another tenant's embeddings hold every slot
                    group.start_soon(lane.run, BLOCKER, lambda: held.wait(WAIT_S))
                await until(lambda: lane.running == lane.slots)
                for i in range(QUEUE_PER_TENANT + 1):
                    group.start_soon(ask, flood, "flood", intent(i))
                await until(lambda: lane.queued_for(FLOOD) == QUEUE_PER_TENANT and bool(refused))
                group.start_soon(ask, victim, "victim", "read the error log")
                await until(lambda: lane.queued_for(VICTIM) == 1)
                held.set()
    assert [error["code"] for error in refused] == ["BUSY"]
    assert refused[0]["retryAfterS"] > 0
    assert sorted(answers) == ["flood"] * QUEUE_PER_TENANT + ["victim"]
    # In arrival order the victim would come after all 16; it waits for a turn or two.
    assert answers.index("victim") <= 2 * lane.slots
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)


@pytest.mark.parametrize(
    ("arguments", "answer"),
    [
        ({"intent": "x" * 10_000_000}, "INVALID_INPUT"),
        ({"intent": "\ud800 read the file"}, "INVALID_INPUT"),
        ({"intent": 42}, "INVALID_INPUT"),
        ({"intent": {"text": "read"}}, "INVALID_INPUT"),
        ({"intent": "echo\x00 the text"}, "results"),
        ({"intent": "é🙂日本語 " * 1_600}, "results"),
        ({"intent": intent(1)}, "results"),
    ],
)
async def test_hostile_intents_are_refused_at_the_edge_or_answered_within_bounds(
    gateway: Gateway, arguments: dict[str, Any], answer: str
) -> None:
    async with Client(gateway.server) as connected:
        result = await connected.call_tool("pml_discover", arguments)
    if answer == "results":
        names = [r["name"] for r in data_of(result)["results"]]
        assert sorted(names) == ["a:echo", "a:fail", "a:mixed"]
    else:
        error = error_of(result)
        assert (error["code"], error["fields"]) == (answer, ["intent"])
    cache = gateway.discovery._query_vectors.cached  # pyright: ignore[reportPrivateUsage]
    assert all(len(key) <= QUERY_MAX_CHARS for key in cache)
    lane = query_lane()
    assert (lane.running, lane.waiting, lane.tracked) == (0, 0, 0)
