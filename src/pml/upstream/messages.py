"""The pool's errors as a person reads them: names shown safely, close matches, checked input.

Every name that reaches a message may come from an agent, so it is escaped and cut:

    >>> show("get_time\\x1b[2J")
    'get_time\\\\x1b[2J'
    >>> close_matches("get_curent_time", ["get_current_time", "convert_time"])
    ['get_current_time']
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import urlsplit, urlunsplit

import httpx2
import mcp_types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from pml.errors import InvalidArgs, InvalidInput, UnknownTool
from pml.upstream.transport import UpstreamTarget

if TYPE_CHECKING:
    from pml.upstream.connection import ServerConnection

SHOWN_CHARS: Final = 60
MAX_LISTED: Final = 10


def show(text: str) -> str:
    """A name as it may appear in a one-line message: escaped, and cut when long."""
    cut = "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text[:SHOWN_CHARS]
    )
    return f"{cut}… ({len(text)} characters)" if len(text) > SHOWN_CHARS else cut


def close_matches(word: str, candidates: Iterable[str]) -> list[str]:
    """Up to three candidates that look like ``word`` (difflib), best first."""
    if len(word) > 4 * SHOWN_CHARS:  # nothing that long is a typo of a real name
        return []
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)


def unknown_server(server: object, configured: list[str]) -> UnknownTool:
    """``UNKNOWN_TOOL`` for a server name that is not configured."""
    text = server if isinstance(server, str) else None
    shown = show(text) if text is not None else f"<{type(server).__name__}>"
    matches = close_matches(text, configured) if text is not None else []
    if matches:
        hint = f"; did you mean {', '.join(matches)}?"
    elif configured:
        more = ", …" if len(configured) > MAX_LISTED else ""
        hint = f"; configured servers: {', '.join(configured[:MAX_LISTED])}{more}"
    else:
        hint = "; no upstream servers are configured"
    return UnknownTool(
        f"Unknown upstream server '{shown}'{hint}", server=shown, suggestions=matches
    )


def unknown_tool(
    server: str, tool: str, tools: Mapping[str, mcp_types.Tool], elsewhere: list[str]
) -> UnknownTool:
    """``UNKNOWN_TOOL`` for a tool the server does not list (``elsewhere``: servers that do)."""
    suggestions = [f"{server}:{name}" for name in close_matches(tool, tools)]
    suggestions += [f"{other}:{tool}" for other in elsewhere[:3]]
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    return UnknownTool(
        f"Unknown tool {server}:{show(tool)} (server '{server}' lists {len(tools)} tools){hint}",
        server=server,
        tool=show(tool),
        suggestions=suggestions,
    )


def check_arguments(server: str, tool: str, arguments: object) -> dict[str, Any]:
    """The arguments as a JSON object, or ``INVALID_ARGS`` saying what is wrong."""
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise InvalidArgs(
            f"Arguments for {server}:{show(tool)} must be an object (names to values), "
            f"not {type(arguments).__name__}"
        )
    mapping = cast(Mapping[object, Any], arguments)
    for key in mapping:
        if not isinstance(key, str):
            raise InvalidArgs(
                f"Argument names for {server}:{show(tool)} must be strings, "
                f"not {type(key).__name__}"
            )
    return {str(key): value for key, value in mapping.items()}


def check_timeout(timeout_s: object) -> float:
    """A per-call timeout in seconds (> 0; ``inf`` waits forever)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise InvalidInput(f"timeout_s must be a number of seconds, not {type(timeout_s).__name__}")
    if math.isnan(timeout_s) or timeout_s <= 0:
        raise InvalidInput(f"timeout_s must be more than 0 seconds, not {timeout_s}")
    return float(timeout_s)


def describe_error(error: BaseException, target: UpstreamTarget) -> str:
    """One line saying why a session could not start or ended."""
    while isinstance(error, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], error)
        error = group.exceptions[0]
    command = None if isinstance(target, Server) else target.command
    if isinstance(error, FileNotFoundError) and command is not None:
        if error.filename in (None, command):
            return f"command not found: {command}"
        return f"cannot start {command}: no such file or directory: {error.filename}"
    if isinstance(error, OSError) and command is not None:
        return f"cannot start {command}: {error.strerror or error}"
    if isinstance(error, MCPError):
        if error.code == mcp_types.CONNECTION_CLOSED:
            return "the server closed the connection while starting"
        return f"the server answered with an error: {error.message}"
    if isinstance(error, httpx2.HTTPError):
        url = "" if isinstance(target, Server) else target.url or ""
        shown, reason = shown_url(url), str(error) or type(error).__name__
        return f"cannot reach {shown}: {reason.replace(url, shown) if url else reason}"
    return f"{type(error).__name__}: {error}"


def shown_url(url: str) -> str:
    """``url`` fit for logs and status: no user info, query or fragment (a ``${TOKEN}``
    expanded there must not be written anywhere).

    >>> shown_url("https://bot:s3cret@api.example.com:8443/mcp?token=abc#x")
    'https://api.example.com:8443/mcp'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def tool_elsewhere(
    connections: Mapping[str, ServerConnection], server: str, tool: str
) -> list[str]:
    """The servers other than ``server`` that list a tool named ``tool``."""
    return [
        name
        for name, conn in connections.items()
        if name != server and any(known.name == tool for known in conn.known_tools())
    ]
