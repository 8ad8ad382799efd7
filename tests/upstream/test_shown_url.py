"""A server URL in a log or a status never shows its secrets (a ``${TOKEN}`` expanded there)."""

from __future__ import annotations

import pytest

from pml.config import ServerSettings
from pml.upstream.messages import shown_url
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio


async def test_an_unreachable_url_is_named_without_its_query_or_user_info() -> None:
    url = "http://robot:pa55word@127.0.0.1:9/mcp?token=S3CRET-T0KEN#frag"
    async with ClientPool({"web": ServerSettings(url=url)}) as pool:
        status = pool.status()[0]
    assert status.state == "failed"
    assert status.last_error is not None
    assert status.last_error.startswith("cannot reach http://127.0.0.1:9/mcp")
    for secret in ("S3CRET-T0KEN", "pa55word", "robot", "frag"):
        assert secret not in status.last_error


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.com/mcp", "https://api.example.com/mcp"),
        ("https://u:p@h.example:8443/a/b?x=1&y=2#f", "https://h.example:8443/a/b"),
        ("http://[::1]:8080/mcp?k=v", "http://[::1]:8080/mcp"),
        ("http://h.example:99999/mcp", "http://h.example/mcp"),
        ("not a url ?token=abc", "not a url "),
        ("", ""),
        ("https://日本.example/パス?鍵=値", "https://日本.example/パス"),
    ],
    ids=["plain", "everything", "ipv6", "bad-port", "no-scheme", "empty", "unicode"],
)
def test_shown_url(url: str, shown: str) -> None:
    assert shown_url(url) == shown
