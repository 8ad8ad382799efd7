"""MCP over HTTP by hand, for tests of what a server does with one request: the initialize
body, and a POST or DELETE on ``/mcp`` with an API key (and a session's id)."""

from __future__ import annotations

import json

import httpx

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-mcp-test", "version": "1"},
    },
}


async def post(url: str, key: str, body: object, session: str | None = None) -> httpx.Response:
    """``body`` as JSON to ``{url}/mcp`` with ``key`` (and ``session``'s id)."""
    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient(timeout=10.0) as http:
        return await http.post(f"{url}/mcp", content=json.dumps(body), headers=headers)


async def delete(url: str, key: str, session: str) -> httpx.Response:
    """End ``session`` with ``key`` (``DELETE /mcp``)."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-11-25",
    }
    async with httpx.AsyncClient(timeout=10.0) as http:
        return await http.delete(f"{url}/mcp", headers=headers)
