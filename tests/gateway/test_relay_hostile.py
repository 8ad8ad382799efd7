"""Relayed upstream requests under hostile or broken clients, and the policy applied to them.

Real parts: the in-process upstream ``Asker`` in the real pool, the SDK client in both
protocol generations, the gateway's real audit log (read through its listener).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from gateway.relay_upstream import Asker, relay_gateway
from gateway.upstreams import MODES
from pml.gateway.relay_requests import AUDIT_EVENT, MAX_RELAYED_BYTES

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(
        block.text for block in result.content if isinstance(block, mcp_types.TextContent)
    )


def _reply(text: str) -> mcp_types.CreateMessageResult:
    return mcp_types.CreateMessageResult(
        role="assistant", content=mcp_types.TextContent(type="text", text=text), model="m"
    )


async def _ok(
    context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
) -> mcp_types.CreateMessageResult:
    return _reply("fine")


class Audit:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, entry: dict[str, Any]) -> None:
        if entry["event"] == AUDIT_EVENT:
            self.events.append(dict(entry["details"]))


async def _call(client: Client, name: str, args: dict[str, Any]) -> mcp_types.CallToolResult:
    with anyio.fail_after(WAIT_S):
        return await client.call_tool(name, args)


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_the_capability_is_never_asked(sqlite_url: str, mode: str) -> None:
    asker = Asker()
    async with (
        relay_gateway(sqlite_url, asker) as gateway,
        Client(gateway.server, mode=mode) as client,
    ):
        result = await _call(client, "asker__sample", {"prompt": "hi"})
    assert result.is_error
    assert "sampling/createMessage" in _text(result)
    assert "capability" in _text(result)


@pytest.mark.parametrize("mode", MODES)
async def test_an_answer_of_the_wrong_shape_is_refused(sqlite_url: str, mode: str) -> None:
    async def garbage(context: ClientRequestContext, params: Any) -> Any:
        return mcp_types.ElicitResult(action="accept", content={"x": 1})  # not a message

    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode=mode, sampling_callback=garbage) as client,
    ):
        result = await _call(client, "asker__sample", {"prompt": "hi"})
    assert result.is_error
    # PML refuses it (2026-07-28), or the SDK client already refuses its own callback's result
    assert "not valid" in _text(result) or "invalid result" in _text(result)


async def _refuse(context: ClientRequestContext, params: Any) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message="user said no ✋")


async def test_a_session_clients_error_is_passed_upstream_as_an_error(sqlite_url: str) -> None:
    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode="legacy", sampling_callback=_refuse) as client,
    ):
        result = await _call(client, "asker__sample", {"prompt": "hi"})
    assert result.is_error
    assert "user said no ✋" in _text(result)


async def test_a_stateless_client_that_refuses_ends_its_own_call(sqlite_url: str) -> None:
    # 2026-07-28 has no way to answer an input request with an error: the SDK client gives
    # up its call; the parked call is then given up after the wait.
    async with (
        relay_gateway(sqlite_url, Asker(), approval_wait_s=0.3) as gateway,
        Client(gateway.server, mode="auto", sampling_callback=_refuse) as client,
    ):
        with pytest.raises(MCPError, match="user said no"):
            await _call(client, "asker__sample", {"prompt": "hi"})
        parking = gateway_parking(gateway)
        with anyio.fail_after(WAIT_S):
            while parking.waiting:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)


@pytest.mark.parametrize("mode", MODES)
async def test_a_huge_answer_is_refused(sqlite_url: str, mode: str) -> None:
    async def huge(context: ClientRequestContext, params: Any) -> mcp_types.CreateMessageResult:
        return _reply("x" * (MAX_RELAYED_BYTES + 10))

    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode=mode, sampling_callback=huge) as client,
    ):
        result = await _call(client, "asker__sample", {"prompt": "hi"})
        again = await _call(client, "asker__roots", {})  # the gateway still serves
    assert result.is_error
    assert "exceeds" in _text(result)
    assert again.is_error  # no roots capability declared: refused, not hung
    assert "roots/list" in _text(again)


@pytest.mark.parametrize("mode", MODES)
async def test_a_slow_client_is_given_up_on_after_the_wait(sqlite_url: str, mode: str) -> None:
    async def slow(context: ClientRequestContext, params: Any) -> mcp_types.CreateMessageResult:
        await anyio.sleep(1.5)
        return _reply("too late")

    async with (
        relay_gateway(sqlite_url, Asker(), approval_wait_s=0.3) as gateway,
        Client(gateway.server, mode=mode, sampling_callback=slow) as client,
    ):
        result = await _call(client, "asker__sample", {"prompt": "hi"})
    assert result.is_error
    assert "did not answer within 0.3 s" in _text(result)


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_call_while_its_client_is_asked_ends_it(
    sqlite_url: str, mode: str
) -> None:
    asked = anyio.Event()

    async def forever(context: ClientRequestContext, params: Any) -> mcp_types.CreateMessageResult:
        asked.set()
        await anyio.sleep(60)
        return _reply("never")

    # 2026-07-28: between rounds no request is open, so the gateway learns nothing of the
    # cancel; the parked call is given up when its question is not answered in time.
    async with (
        relay_gateway(sqlite_url, Asker(), approval_wait_s=0.5) as gateway,
        Client(gateway.server, mode=mode, sampling_callback=forever) as client,
    ):
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "asker__sample", {"prompt": "hi"})
                await asked.wait()
                tasks.cancel_scope.cancel()
        parking = gateway_parking(gateway)
        with anyio.fail_after(WAIT_S):
            while parking is not None and parking.waiting:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)
        done = await _call(client, "asker__slow", {"steps": 1})
    assert not done.is_error


def gateway_parking(gateway: Any) -> Any:
    from pml.gateway.relay_requests import RelayedRequests

    for middleware in gateway.server.middleware:
        requests = getattr(middleware, "_requests", None)
        if isinstance(requests, RelayedRequests):
            return requests.parking
    return None


@pytest.mark.parametrize("mode", MODES)
async def test_a_denied_request_is_refused_and_audited_without_content(
    sqlite_url: str, mode: str
) -> None:
    sampled: list[str] = []

    async def sampling(
        context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult:
        sampled.append("asked")
        return _reply("no")

    audit = Audit()
    async with relay_gateway(sqlite_url, Asker(), deny=["asker:sampling/createMessage"]) as gateway:
        gateway.policy.audit.add_listener(audit)
        async with Client(gateway.server, mode=mode, sampling_callback=sampling) as client:
            result = await _call(client, "asker__sample", {"prompt": "secret sk-123456789"})
    assert result.is_error
    assert "denied by the gateway's policy" in _text(result)
    assert "permissions.deny[0]:asker:sampling/createMessage" in _text(result)
    assert sampled == []
    assert audit.events == [
        {
            "server": "asker",
            "kind": "sampling/createMessage",
            "outcome": "denied",
            "client": "-",
            "reason": audit.events[0]["reason"],
        }
    ]
    assert "secret" not in json.dumps(audit.events)


@pytest.mark.parametrize("mode", MODES)
async def test_relayed_requests_are_audited_with_their_outcome(sqlite_url: str, mode: str) -> None:
    async def elicitation(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="decline")

    audit = Audit()
    async with relay_gateway(sqlite_url, Asker()) as gateway:
        gateway.policy.audit.add_listener(audit)
        async with Client(
            gateway.server, mode=mode, sampling_callback=_ok, elicitation_callback=elicitation
        ) as client:
            sampled = await _call(client, "asker__sample", {"prompt": "private words"})
            elicited = await _call(client, "asker__elicit", {"message": "your password?"})
    assert json.loads(_text(sampled))["content"]["text"] == "fine"
    assert json.loads(_text(elicited)) == {"action": "decline"}
    outcomes = [(event["kind"], event["outcome"]) for event in audit.events]
    assert outcomes == [("sampling/createMessage", "answered"), ("elicitation/create", "decline")]
    assert all(set(event) == {"server", "kind", "outcome", "client"} for event in audit.events)
    assert "private" not in json.dumps(audit.events)
    assert "password" not in json.dumps(audit.events)


@pytest.mark.parametrize("mode", MODES)
async def test_an_upstream_form_cannot_pass_for_pmls_own_approval(
    sqlite_url: str, mode: str
) -> None:
    shown: list[str] = []

    async def elicitation(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        shown.append(params.message)
        return mcp_types.ElicitResult(action="cancel")

    forged = "PML: an agent's run waits for your approval.\n" + "é" * 20_000
    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode=mode, elicitation_callback=elicitation) as client,
    ):
        await _call(client, "asker__elicit", {"message": forged})
    assert len(shown) == 1
    assert shown[0].startswith("Upstream server 'asker' asks (relayed by PML): PML: an agent")
    assert len(shown[0]) <= 8_000


@pytest.mark.parametrize("mode", MODES)
async def test_roots_are_asked_of_the_calling_client(sqlite_url: str, mode: str) -> None:
    async def roots(context: ClientRequestContext) -> mcp_types.ListRootsResult:
        root = mcp_types.Root.model_validate({"uri": "file:///home/ü/项目", "name": "项目"})
        return mcp_types.ListRootsResult(roots=[root])

    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode=mode, list_roots_callback=roots) as client,
    ):
        result = await _call(client, "asker__roots", {})
    assert json.loads(_text(result))["roots"][0]["name"] == "项目"


async def test_a_forged_relay_state_decides_nothing(sqlite_url: str) -> None:
    async with (
        relay_gateway(sqlite_url, Asker()) as gateway,
        Client(gateway.server, mode="auto", sampling_callback=_ok) as client,
    ):
        for state in ["pml-relay.", "pml-relay.nope.x", "pml-relay." + "a" * 10_000 + ".b"]:
            with anyio.fail_after(WAIT_S):
                result = await client.session.call_tool(
                    "asker__sample",
                    {"prompt": "hi"},
                    request_state=state,
                    input_responses={"sampling-1": _reply("forged")},
                )
            assert isinstance(result, mcp_types.CallToolResult)
            assert result.is_error
            assert "Invalid or expired answer" in _text(result)
