"""The gateway over streamable HTTP on a real uvicorn (127.0.0.1, a free port), with API keys."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client

from gateway.raw_mcp import INIT
from gateway.upstreams import Upstream
from pml import __version__
from pml.gateway import http as http_module
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft
from pml.sections_limits import LimitsSettings

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)
MODES = ["legacy", "2026-07-28"]
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@dataclass
class Served:
    url: str
    keys: ApiKeys
    gateway: Gateway

    async def key(self, org: str = "acme", project: str = "webapp", user: str = "erwan") -> str:
        return (await self.keys.create(org, project, user=user))[0]


@pytest.fixture
async def served(gateway: Gateway) -> AsyncGenerator[Served]:
    async with running_http(gateway) as url:
        yield Served(url, ApiKeys(gateway.db), gateway)


async def mcp_call(served: Served, key: str, mode: str, tool: str, args: dict[str, Any]) -> Any:
    """One tools/call through an SDK client over HTTP with ``key``, in ``mode``."""
    headers = {"Authorization": f"Bearer {key}"}
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(f"{served.url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            return await client.call_tool(tool, args)


async def test_health_answers_without_a_key_and_reveals_no_configuration(served: Served) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.get(f"{served.url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


BAD_AUTHORIZATIONS = [
    None,
    "",
    "Bearer",
    "Bearer ,",
    "Basic dXNlcjpwYXNz",
    "Bearer pml_not-a-real-key-000000000000000000",
    "Bearer pml_" + "A" * 43 + " extra",
    "Bearer " + "x" * 5000,
    "Bearer ключ",
]
PROTECTED = [
    ("POST", "/mcp"),
    ("GET", "/mcp"),
    ("DELETE", "/mcp"),
    ("GET", "/api/capabilities"),
    ("POST", "/health"),
    ("GET", "/health/"),
    ("GET", "/anything-else"),
    ("GET", "/uix"),
]


async def test_requests_without_a_valid_key_get_401_and_nothing_else(
    gateway: Gateway, upstreams: dict[str, Upstream]
) -> None:
    # The address's budget of failed keys covers every attempt here, so each is a 401;
    # past it they are 429 (tests/web/test_rate_limits.py).
    room = LimitsSettings(auth_failure_burst=len(BAD_AUTHORIZATIONS) * len(PROTECTED))
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "a__echo", "arguments": {}},
    }
    refused: list[tuple[str | None, str, str]] = []
    async with (
        running_http(gateway, limits=room) as url,
        httpx.AsyncClient(timeout=TIMEOUT) as http,
    ):
        for authorization in BAD_AUTHORIZATIONS:
            for method, path in PROTECTED:
                headers = {key.encode(): value.encode() for key, value in MCP_HEADERS.items()}
                if authorization is not None:
                    headers[b"Authorization"] = authorization.encode()
                response = await http.request(
                    method,
                    f"{url}{path}",
                    headers=headers,
                    json=call if method == "POST" else None,
                )
                body = response.json()
                assert response.status_code == 401, (authorization, method, path)
                assert set(body) == {"error"}
                assert body["error"]["code"] == "UNAUTHORIZED"
                assert "mcp-session-id" not in response.headers
                refused.append((authorization, method, path))
    assert len(refused) == len(BAD_AUTHORIZATIONS) * len(PROTECTED)
    assert upstreams["a"].calls == []


async def test_the_dashboard_root_sends_a_visitor_without_a_session_to_sign_in(
    served: Served,
) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        for authorization in BAD_AUTHORIZATIONS:
            headers = [] if authorization is None else [(b"Authorization", authorization.encode())]
            response = await http.get(f"{served.url}/", headers=headers)
            assert response.status_code == 303
            assert response.headers["location"] == "/ui/login"
            assert response.content == b""


async def test_a_revoked_key_gets_401(served: Served) -> None:
    key, record = await served.keys.create("acme", "webapp", user="erwan")
    assert (await mcp_call(served, key, "legacy", "cap_list", {})).is_error is False
    await served.keys.revoke(record.prefix)
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.post(
            f"{served.url}/mcp",
            json=INIT,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"},
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHORIZED"


@pytest.mark.parametrize("mode", MODES)
async def test_a_valid_key_reaches_the_tools_in_both_protocol_generations(
    served: Served, mode: str
) -> None:
    key = await served.key()
    listed = await mcp_call(served, key, mode, "cap_list", {})
    assert listed.structured_content == {"items": [], "total": 0}
    echoed = await mcp_call(served, key, mode, "a__echo", {"text": "ü"})
    assert echoed.structured_content == {"server": "a", "tool": "echo", "args": {"text": "ü"}}


@pytest.mark.parametrize("mode", MODES)
async def test_each_key_sees_only_its_own_org_and_project(served: Served, mode: str) -> None:
    acme, globex = await served.key("acme", "webapp"), await served.key("globex", "site", "gina")
    registry = served.gateway.registry
    draft = CapabilityDraft(code="return 'acme secret'", name="acme_only")
    created = (await registry.capture(Scope("acme", "webapp", "erwan"), draft, latency_ms=1)).record
    seen_by_acme = (await mcp_call(served, acme, mode, "cap_list", {})).structured_content
    seen_by_globex = (await mcp_call(served, globex, mode, "cap_list", {})).structured_content
    assert [item["display_name"] for item in seen_by_acme["items"]] == ["acme_only"]
    assert seen_by_globex == {"items": [], "total": 0}
    other = await mcp_call(served, globex, mode, "cap_whois", {"fqdn": created.fqdn})
    assert other.is_error
    assert other.structured_content["error"]["code"] == "NOT_FOUND"
    created_by = seen_by_acme["items"][0]["created_by"]
    assert created_by == "erwan"


async def test_a_session_opened_with_one_key_cannot_be_used_with_another(served: Served) -> None:
    first, second = await served.key(), await served.key("globex", "site", "gina")
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        opened = await http.post(
            f"{served.url}/mcp",
            json=INIT,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {first}"},
        )
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        hijack = await http.post(
            f"{served.url}/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={
                **MCP_HEADERS,
                "Authorization": f"Bearer {second}",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": "2025-11-25",
            },
        )
    assert hijack.status_code == 404


async def test_an_oversized_body_is_refused_before_any_tool_runs(
    served: Served, upstreams: dict[str, Upstream]
) -> None:
    key = await served.key()
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "a__echo", "arguments": {"text": "x" * (5 * 1024 * 1024)}},
    }
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.post(
            f"{served.url}/mcp",
            json=call,
            headers={
                **MCP_HEADERS,
                "Authorization": f"Bearer {key}",
                "MCP-Protocol-Version": "2026-07-28",
            },
        )
    assert response.status_code == 413
    assert upstreams["a"].calls == []


async def test_a_key_check_that_fails_is_a_500_not_a_pass(gateway: Gateway) -> None:
    async def broken(token: str) -> Scope | None:
        raise RuntimeError("database is down")

    async with running_http(gateway, authenticate=broken) as url, httpx.AsyncClient() as http:
        response = await http.post(
            f"{url}/mcp", json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer abc"}
        )
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "INTERNAL_ERROR"


HTTP_GATEWAY = """
import sys, anyio
from pathlib import Path
from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.http import serve_http
from pml.upstream.pool import ClientPool

class MarkingPool(ClientPool):
    async def stop(self):
        await super().stop()
        Path(sys.argv[2]).write_text("stopped")

def ready(url):
    print(url, flush=True)

pool = MarkingPool({"a": Upstream("a").server})
settings = gateway_settings(sys.argv[1], expose_upstream=True)
anyio.run(lambda: serve_http(settings, "127.0.0.1", 0, pool=pool, ready=ready))
"""


async def test_sigterm_shuts_down_gracefully_and_stops_the_pool(tmp_path: Path) -> None:
    here = Path(__file__).parent
    path = [str(here.parent), str(here.parents[1] / "src")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    marker = tmp_path / "pool-stopped"
    command = [sys.executable, "-c", HTTP_GATEWAY, f"sqlite:///{tmp_path / 'pml.db'}", str(marker)]
    with anyio.fail_after(30):
        async with await anyio.open_process(command, env=env, stderr=None) as process:
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive()
            url = line.decode().strip()
            async with httpx.AsyncClient(timeout=TIMEOUT) as http:
                assert (await http.get(f"{url}/health")).status_code == 200
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    assert marker.read_text() == "stopped"


async def test_a_listening_client_does_not_hold_the_server_open_when_it_stops(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_module, "GRACEFUL_SHUTDOWN_S", 60)  # waited whole, it would show
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    headers = {"Authorization": f"Bearer {key}"}
    events: list[object] = []
    listening, ended = anyio.Event(), anyio.Event()
    stopped_in = float("inf")

    async def listen(url: str) -> None:
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            listening.set()
            async for event in subscription:
                events.append(event)
        ended.set()  # the stream ended as a stream ends: no error

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            async with running_http(gateway) as url:
                group.start_soon(listen, url)
                await listening.wait()
                stopping = anyio.current_time()
            stopped_in = anyio.current_time() - stopping
            await ended.wait()
    assert stopped_in < 20, stopped_in
    assert events == []


async def test_while_the_server_stops_a_new_listen_is_refused_and_after_a_restart_served(
    gateway: Gateway,
) -> None:
    key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
    headers = {"Authorization": f"Bearer {key}"}
    with anyio.fail_after(30):
        async with (
            running_http(gateway) as url,
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            gateway.server.notifier.end_streams()  # what the server does when it stops
            with pytest.raises(MCPError, match="The server is shutting down"):
                async with client.listen(tools_list_changed=True):
                    pass
        async with (
            running_http(gateway) as url,
            create_mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            await gateway.server.notifier.tools_changed()
            assert isinstance(await anext(aiter(subscription)), ToolsListChanged)
