"""Hostile ``Authorization`` headers against the key check and its per-address limit, sent
as raw bytes over a socket to a real uvicorn: each is a 401 or a 429 (or the HTTP parser's
own 400/431 for bytes HTTP does not allow), never a 500, and the server keeps serving."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from gateway.upstreams import Upstream, gateway_settings
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import Gateway, open_gateway
from pml.sections import AuditSettings
from pml.sections_limits import LimitsSettings
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

REFUSED = {401, 429}
PARSER_REFUSALS = {400, 431}
HOSTILE: list[bytes] = [
    b"Bearer",
    b"Bearer ",
    b"Bearer " + b" " * 5000,
    b"Bearer " + b"A" * 60_000,  # a huge header, within what the parser reads
    b"Bearer " + "ключ-🙂".encode(),
    b"Bearer \xff\xfe\xfd",
    b"Bearer pml_abc\x00def",
    b"Bearer \x00",
    b"Bearer\tpml_" + b"a" * 43,
    b"bearer pml_" + b"a" * 43,
    b"Bearer pml_" + b"a" * 43 + b" trailing",
    b"Bearer pml_" + b"=" * 600,
    b"Bearer ../../etc/passwd",
    b"Bearer ' OR 1=1 --",
    b"Bearer {{7*7}}${jndi:ldap://x}",
    b"Basic dXNlcjpwYXNz",
    b"Token pml_" + b"a" * 43,
    b" " * 100,
    b"",
]


@pytest.fixture
async def gateway(sqlite_url: str) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(sqlite_url, expose_upstream=True)
    settings = settings.model_copy(update={"audit": AuditSettings(file="")})
    async with open_gateway(settings, pool=ClientPool({"a": Upstream("a").server})) as gw:
        yield gw


async def raw_status(url: str, request: bytes) -> int:
    """The status code of one raw HTTP/1.1 request (0: the connection closed unanswered)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(request)
            received = b""
            while b"\r\n" not in received:
                try:
                    received += await stream.receive()
                except anyio.EndOfStream:
                    return 0
    return int(received.split(b" ", 2)[1])


def request_with(authorization: bytes | None, path: bytes = b"/api/capabilities") -> bytes:
    lines = [b"GET " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    if authorization is not None:
        lines.append(b"Authorization: " + authorization)
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize("path", [b"/api/capabilities", b"/mcp"])
async def test_hostile_authorization_headers_get_401_or_429_never_500(
    gateway: Gateway, path: bytes
) -> None:
    limits = LimitsSettings(auth_failure_burst=len(HOSTILE) // 2)
    statuses: dict[bytes, int] = {}
    async with running_http(gateway, limits=limits) as url:
        for value in HOSTILE:
            statuses[value] = await raw_status(url, request_with(value, path))
        statuses[b"<two headers>"] = await raw_status(
            url,
            b"GET /api/capabilities HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Authorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
        )
        key = (await ApiKeys(gateway.db).create("acme", "webapp", user="erwan"))[0]
        async with httpx.AsyncClient(timeout=10.0) as http:
            health = await http.get(f"{url}/health")
            blocked = await http.get(f"{url}/api/capabilities", headers={"Authorization": key})
    unexpected = {
        value[:40]: status
        for value, status in statuses.items()
        if status not in REFUSED | PARSER_REFUSALS
    }
    assert unexpected == {}
    assert 401 in statuses.values()
    assert 429 in statuses.values()  # past the burst: the address is refused
    assert health.status_code == 200  # still serving
    assert blocked.status_code == 429


async def test_hostile_headers_within_the_budget_are_401s(gateway: Gateway) -> None:
    limits = LimitsSettings(auth_failure_burst=1000)
    async with running_http(gateway, limits=limits) as url:
        statuses = [await raw_status(url, request_with(value)) for value in HOSTILE]
    # Only bytes HTTP does not allow in a header (NUL) may stop at the parser.
    assert all(status == 401 or status in PARSER_REFUSALS for status in statuses)
    assert statuses.count(401) >= len(HOSTILE) - 2
