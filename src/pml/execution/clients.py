"""Who is calling: an agent directly, or a PML client (``pml connect``) that runs code locally.

    client = client_from_headers({"x-pml-client": "pml-connect/0.4.0",
                                  "x-pml-client-servers": "filesystem,git"})
    with calling_as(client):                 # for the duration of one tool call
        current_client()                     # ClientCaller(version=..., servers=...)

A PML client says so on every HTTP request with the header ``X-PML-Client:
pml-connect/<version>`` and names the upstream servers it runs on the user's machine in
``X-PML-Client-Servers`` (comma-separated server names). Snippets that use those servers
are handed back to the client (``execute_locally``, SPEC §9) instead of running on the
gateway. A request without the header is an ordinary MCP client. The caller is kept in a
context variable set by the MCP edge around each tool call, so the execution service sees
it without every layer in between passing it along.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

CLIENT_HEADER = "x-pml-client"
SERVERS_HEADER = "x-pml-client-servers"
CLIENT_PRODUCT = "pml-connect"
MAX_CLIENT_SERVERS = 64
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CLIENT_VALUE = re.compile(r"pml-connect(?:/([0-9A-Za-z.+_-]{1,32}))?")

HOW_TO_CONNECT = (
    "run `pml connect --server <this gateway's URL> --api-key <your key>` on your machine, "
    "with those servers in its pml.toml, and point your agent at it"
)


@dataclass(frozen=True, slots=True)
class ClientCaller:
    """A PML client: its version and the servers it runs locally."""

    version: str
    servers: frozenset[str]


_current: ContextVar[ClientCaller | None] = ContextVar("pml_client_caller", default=None)
_key: ContextVar[str | None] = ContextVar("pml_requesting_key", default=None)


def current_client() -> ClientCaller | None:
    """The PML client making the current tool call, or None for any other caller."""
    return _current.get()


def current_key() -> str | None:
    """The display prefix of the API key making the current tool call (None: no key)."""
    return _key.get()


@contextmanager
def calling_as(client: ClientCaller | None, key: str | None = None) -> Generator[None]:
    """Mark the calls made inside the block as coming from ``client`` with API key ``key``
    (its display prefix: approvals show who asked)."""
    token = _current.set(client)
    key_token = _key.set(key)
    try:
        yield
    finally:
        _key.reset(key_token)
        _current.reset(token)


def client_from_headers(headers: Mapping[str, str]) -> ClientCaller | None:
    """The PML client a request's headers announce (None: not a PML client).

    A malformed announcement is not a PML client: the request is served as any other.
    Server names that are not valid MCP server names are ignored; at most
    ``MAX_CLIENT_SERVERS`` are kept.
    """
    announced = headers.get(CLIENT_HEADER)
    if announced is None:
        return None
    match = _CLIENT_VALUE.fullmatch(announced.strip())
    if match is None:
        return None
    servers: list[str] = []
    for part in headers.get(SERVERS_HEADER, "").split(","):
        name = part.strip()
        if _SERVER_NAME.fullmatch(name) and name not in servers:
            servers.append(name)
        if len(servers) >= MAX_CLIENT_SERVERS:
            break
    return ClientCaller(version=match.group(1) or "", servers=frozenset(servers))
