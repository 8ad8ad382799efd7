"""Prompts, resources, completions, subscriptions and list changes through the gateway,
against two in-process upstream servers (``surface_upstreams.Library``), for clients of both
protocol generations. The server-everything tests are in ``e2e/test_e2e_surface.py``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import PromptsListChanged, ResourceUpdated

from gateway.surface_upstreams import SHARED_URI, Library
from gateway.upstreams import MODES, gateway_settings
from pml.gateway.server import Gateway, open_gateway
from pml.gateway.surface_edge import RESOURCE_NOT_FOUND
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

WAIT_S = 5.0
HOSTILE_NAMES = [
    "a__" + "x" * 5_000,
    "a__gréét ✓ 日本語",
    "a__greet'; DROP TABLE prompts; --",
    "a__../../etc/passwd",
    "a__greet\x1b[2J\x00",
    "zzz__greet",
    "greet",
    "a__",
]


@pytest.fixture
def libraries() -> dict[str, Library]:
    return {"a": Library("a"), "b": Library("b")}


@pytest.fixture
async def surface_gateway(
    sqlite_url: str, libraries: dict[str, Library]
) -> AsyncGenerator[Gateway]:
    pool = ClientPool({name: library.server for name, library in libraries.items()})
    settings = gateway_settings(sqlite_url, expose_upstream=False)
    async with open_gateway(settings, pool=pool) as gateway:
        yield gateway


class Received:
    """A client message handler that keeps every notification."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []
        self.arrived = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        self.messages.append(message)
        self.arrived.set()

    def of(self, kind: type[Any]) -> list[Any]:
        return [message for message in self.messages if isinstance(message, kind)]

    async def wait_for(self, kind: type[Any]) -> Any:
        with anyio.fail_after(WAIT_S):
            while not self.of(kind):
                self.arrived = anyio.Event()
                await self.arrived.wait()
        return self.of(kind)[0]


@pytest.mark.parametrize("mode", MODES)
async def test_the_gateway_declares_prompts_resources_completions_and_logging(
    surface_gateway: Gateway, mode: str
) -> None:
    async with Client(surface_gateway.server, mode=mode) as client:
        capabilities = client.server_capabilities
    assert capabilities.prompts is not None
    assert capabilities.prompts.list_changed
    assert capabilities.resources is not None
    assert capabilities.resources.subscribe
    assert capabilities.resources.list_changed
    assert capabilities.completions is not None
    if mode == "legacy":
        assert capabilities.logging is not None


@pytest.mark.parametrize("mode", MODES)
async def test_prompts_are_listed_per_server_and_got_from_their_server(
    surface_gateway: Gateway, libraries: dict[str, Library], mode: str
) -> None:
    async with Client(surface_gateway.server, mode=mode) as client:
        names = [prompt.name for prompt in (await client.list_prompts()).prompts]
        got = await client.get_prompt("b__greet", {"who": "Ada"})

    assert names == ["a__greet", "b__greet"]
    text = got.messages[0].content
    assert isinstance(text, mcp_types.TextContent)
    assert text.text == "b greets Ada"
    assert libraries["b"].asked == [("prompts/get", "greet")]
    assert libraries["a"].asked == []


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_an_unknown_or_hostile_prompt_name_is_a_clear_error_that_reaches_no_server(
    surface_gateway: Gateway, libraries: dict[str, Library], name: str
) -> None:
    async with Client(surface_gateway.server) as client:
        with pytest.raises(MCPError) as raised:
            await client.get_prompt(name, {"who": "x"})

    assert raised.value.code == mcp_types.INVALID_PARAMS
    assert "prompt" in raised.value.message.lower()
    assert len(raised.value.message) < 400
    assert "\x1b" not in raised.value.message
    assert libraries["a"].asked == libraries["b"].asked == []


async def test_an_unknown_prompt_of_a_known_server_names_the_server_and_a_close_match(
    surface_gateway: Gateway,
) -> None:
    async with Client(surface_gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("a__greeet")

    assert "server 'a' has no prompt 'greeet'" in raised.value.message
    assert "a__greet" in raised.value.message
    assert raised.value.data["code"] == "UNKNOWN_TOOL"


@pytest.mark.parametrize("mode", MODES)
async def test_resources_carry_a_marked_uri_that_reads_from_their_server(
    surface_gateway: Gateway, libraries: dict[str, Library], mode: str
) -> None:
    async with Client(surface_gateway.server, mode=mode) as client:
        listed = (await client.list_resources()).resources
        uris = [resource.uri for resource in listed]
        read = await client.read_resource("pml://b/note://b/readme")

    assert uris == [
        "pml://a/note://a/readme",
        "pml://a/shared://same",
        "pml://b/note://b/readme",
        "pml://b/shared://same",
    ]
    assert [resource.name for resource in listed][:2] == ["a__readme", "a__same"]
    content = read.contents[0]
    assert isinstance(content, mcp_types.TextResourceContents)
    assert content.text == "b has note://b/readme"
    assert content.uri == "pml://b/note://b/readme"  # the URI the client asked for
    assert libraries["b"].asked == [("resources/read", "note://b/readme")]


async def test_an_upstream_uri_reads_from_the_one_server_that_has_it(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    async with Client(surface_gateway.server) as client:
        read = await client.read_resource("note://a/readme")
        expanded = await client.read_resource("note://b/42")

    assert read.contents[0].uri == "note://a/readme"
    assert libraries["a"].asked == [("resources/read", "note://a/readme")]
    assert libraries["b"].asked == [("resources/read", "note://b/42")]  # by its template
    assert expanded.contents[0].uri == "note://b/42"


async def test_a_uri_two_servers_list_is_refused_with_the_marked_uris_to_use(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    async with Client(surface_gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(SHARED_URI)
        marked = await client.read_resource("pml://a/shared://same")

    assert raised.value.code == mcp_types.INVALID_PARAMS
    assert "pml://a/shared://same" in raised.value.message
    assert "pml://b/shared://same" in raised.value.message
    assert marked.contents[0].uri == "pml://a/shared://same"
    assert libraries["b"].asked == []


@pytest.mark.parametrize(
    "uri",
    [
        "nowhere://x",
        "pml://zzz/note://a/readme",
        "pml://%ff%fe/x",
        "x" * 20_000,
        "javascript:alert(1)",
        "note://a/../../../etc/passwd\x00",
    ],
)
async def test_an_unknown_or_hostile_uri_is_a_clear_error_that_reaches_no_server(
    surface_gateway: Gateway, libraries: dict[str, Library], uri: str
) -> None:
    async with Client(surface_gateway.server) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)

    assert raised.value.code in (RESOURCE_NOT_FOUND, mcp_types.INVALID_PARAMS)
    assert len(raised.value.message) < 400
    assert libraries["a"].asked == libraries["b"].asked == []


@pytest.mark.parametrize("mode", MODES)
async def test_templates_are_marked_and_complete_through_their_server(
    surface_gateway: Gateway, libraries: dict[str, Library], mode: str
) -> None:
    async with Client(surface_gateway.server, mode=mode) as client:
        templates = (await client.list_resource_templates()).resource_templates
        by_template = await client.complete(
            mcp_types.ResourceTemplateReference(uri="pml://b/note://b/{id}"),
            {"name": "id", "value": "A"},
        )
        by_prompt = await client.complete(
            mcp_types.PromptReference(name="a__greet"), {"name": "who", "value": "G"}
        )

    assert [t.uri_template for t in templates] == ["pml://a/note://a/{id}", "pml://b/note://b/{id}"]
    assert by_template.completion.values == ["Ada", "Alan"]
    assert by_prompt.completion.values == ["Grace"]
    assert libraries["b"].asked == [("completion/complete", "note://b/{id}")]
    assert libraries["a"].asked == [("completion/complete", "greet")]


async def test_wrong_types_in_requests_are_invalid_params_and_change_nothing(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    wrong: list[tuple[str, dict[str, Any]]] = [
        ("prompts/get", {"name": 5}),
        ("prompts/get", {"name": "a__greet", "arguments": {"who": ["not", "a", "string"]}}),
        ("prompts/get", {}),
        ("resources/read", {"uri": None}),
        ("resources/subscribe", {"uri": {"nested": True}}),
        ("completion/complete", {"ref": {"type": "ref/other"}, "argument": {}}),
        ("prompts/list", {"cursor": "not-ours"}),
    ]
    async with Client(surface_gateway.server, mode="legacy") as client:
        for method, params in wrong:
            request = mcp_types.Request[dict[str, Any], str](method=method, params=params)
            with pytest.raises(MCPError) as raised:
                await client.session.send_request(request, mcp_types.EmptyResult)
            assert raised.value.code == mcp_types.INVALID_PARAMS, (method, params)
        names = [prompt.name for prompt in (await client.list_prompts()).prompts]

    assert names == ["a__greet", "b__greet"]
    assert libraries["a"].asked == libraries["b"].asked == []


async def test_a_session_client_is_told_when_an_upstream_prompt_list_changes(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    received = Received()
    async with Client(surface_gateway.server, mode="legacy", message_handler=received) as client:
        assert len((await client.list_prompts()).prompts) == 2
        await libraries["a"].add_prompt("later")
        await received.wait_for(mcp_types.PromptListChangedNotification)
        names = [p.name for p in (await client.list_prompts(cache_mode="bypass")).prompts]

    assert "a__later" in names


async def test_a_listening_2026_client_is_told_when_an_upstream_prompt_list_changes(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    async with (
        Client(surface_gateway.server) as client,
        client.listen(prompts_list_changed=True) as subscription,
    ):
        assert client.protocol_version == "2026-07-28"
        await libraries["b"].add_prompt("fresh")
        with anyio.fail_after(WAIT_S):
            event = await anext(aiter(subscription))
        names = [p.name for p in (await client.list_prompts(cache_mode="bypass")).prompts]

    assert isinstance(event, PromptsListChanged)
    assert "b__fresh" in names


async def test_a_subscribed_session_alone_hears_of_a_resource_update(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    subscriber, bystander = Received(), Received()
    async with (
        Client(surface_gateway.server, mode="legacy", message_handler=subscriber) as client,
        Client(surface_gateway.server, mode="legacy", message_handler=bystander) as other,
    ):
        await other.list_resources()
        await client.session.send_request(
            mcp_types.SubscribeRequest(
                params=mcp_types.SubscribeRequestParams(uri="pml://a/note://a/readme")
            ),
            mcp_types.EmptyResult,
        )
        assert surface_gateway.surface is not None
        assert surface_gateway.surface.subscriptions.subscribed("a", "note://a/readme")
        assert libraries["a"].listens[-1] == ["note://a/readme"]  # upstream is 2026-07-28
        await libraries["a"].touch("note://a/readme")
        update = await subscriber.wait_for(mcp_types.ResourceUpdatedNotification)
        await client.session.send_request(
            mcp_types.UnsubscribeRequest(
                params=mcp_types.UnsubscribeRequestParams(uri="pml://a/note://a/readme")
            ),
            mcp_types.EmptyResult,
        )
        await other.list_resources()  # a round trip: an update would be in by now
        still = surface_gateway.surface.subscriptions.subscribed("a", "note://a/readme")

    assert update.params.uri == "pml://a/note://a/readme"
    assert bystander.of(mcp_types.ResourceUpdatedNotification) == []
    assert not still  # the last subscriber left: the upstream subscription is dropped


async def test_a_2026_listen_stream_holds_its_resource_subscriptions_upstream(
    surface_gateway: Gateway, libraries: dict[str, Library]
) -> None:
    async with (
        Client(surface_gateway.server) as client,
        client.listen(resource_subscriptions=["pml://b/note://b/readme"]) as subscription,
    ):
        await libraries["b"].touch("note://b/readme")
        with anyio.fail_after(WAIT_S):
            event = await anext(aiter(subscription))
    assert isinstance(event, ResourceUpdated)
    assert event.uri == "pml://b/note://b/readme"
    assert libraries["b"].listens[-1] == ["note://b/readme"]


async def test_a_server_that_fails_is_left_out_of_listings(sqlite_url: str) -> None:
    from gateway.upstreams import NO_SUCH_COMMAND
    from pml.config import ServerSettings

    library = Library("a")
    pool = ClientPool({"a": library.server, "broken": ServerSettings(command=NO_SUCH_COMMAND)})
    async with (
        open_gateway(gateway_settings(sqlite_url, expose_upstream=False), pool=pool) as gateway,
        Client(gateway.server) as client,
    ):
        names = [prompt.name for prompt in (await client.list_prompts()).prompts]
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("broken__anything")

    assert names == ["a__greet"]
    assert "broken" in raised.value.message


async def test_prompt_gets_and_resource_reads_are_audited_with_their_server(
    surface_gateway: Gateway,
) -> None:
    events: list[dict[str, Any]] = []
    remove = surface_gateway.policy.audit.add_listener(events.append)
    try:
        async with Client(surface_gateway.server, mode="legacy") as client:
            await client.get_prompt("a__greet", {"who": "Ada"})
            await client.read_resource("pml://b/note://b/readme")
            with pytest.raises(MCPError):
                await client.get_prompt("a__nope")
    finally:
        remove()

    seen = [(event["event"], event["details"].get("server")) for event in events]
    assert ("PROMPT_GET", "a") in seen
    assert ("RESOURCE_READ", "b") in seen
    got = next(event for event in events if event["event"] == "PROMPT_GET")
    assert got["details"]["success"] is True
    assert got["actor"] == "erwan"
    assert len([e for e in events if e["event"] == "PROMPT_GET"]) == 1  # a refusal: no call
