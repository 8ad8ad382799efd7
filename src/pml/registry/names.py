"""Capability names: display-name validation, auto names, namespaces and MCP tool names.

Display names match ``^[A-Za-z0-9_:-]{1,64}$`` (SPEC §6.2). ``ns:action`` gives the MCP tool
``mcp__ns__action``; a name without ``:`` keeps the capability's namespace.

Example::

    >>> validate_name("fs:read_json")
    'fs:read_json'
    >>> split_display_name("fs:read_json", "code")
    ('fs', 'read_json')
    >>> tool_name_for(*split_display_name("summary", "fs"))
    'mcp__fs__summary'
    >>> namespace_from_tools(["filesystem:read_file"]), server_of("mcp__fs__read_json")
    ('fs', 'fs')

``NAME_PATTERN`` is always used with ``fullmatch`` (``$`` alone would let a trailing newline
through); it keeps ``^...$`` so that it can be reused in JSON Schema.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from pml.analysis.secret_text import holds_token
from pml.errors import InvalidInput, InvalidName
from pml.registry.fqdn import Fqdn, is_fqdn, message_value

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_:-]{1,64}$")

DEFAULT_NAMESPACE = "code"
CAPABILITY_TOOL_PREFIX = "mcp__"
# Well-known servers whose namespace is a short form (SPEC §6.1); every other server keeps
# its own (sanitised) name.
SHORT_NAMESPACES: dict[str, str] = {"filesystem": "fs", "pml": "code"}  # mcp.pml is PML's own

_NAMESPACE_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HEX = re.compile(r"[0-9a-f]{8,}")
_MAX_COMPONENT = 64
# MCP tool names (SPEC §3): the strictest client rule in use.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOL_NAME = 64
_TOOL_DIGEST = 8
_SHORT_NAMESPACE = 24


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid display name, else raise ``InvalidName``."""
    if isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None:
        if holds_token(name):  # a name is shown to every caller: never a credential
            raise InvalidName(
                "Invalid capability name: it looks like a secret (a token or key). "
                "Name what the capability does."
            )
        return name
    raise InvalidName(
        f'Invalid capability name: "{message_value(name)}". '
        "Must be alphanumeric with underscores, hyphens, and colons only."
    )


def _hex_prefix(code_hash: str) -> str:
    if not isinstance(code_hash, str) or _HEX.fullmatch(code_hash) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput(
            "code_hash must be a lowercase hex string of at least 8 characters",
            field="code_hash",
        )
    return code_hash[:8]


def auto_display_name(code_hash: str) -> str:
    """The display name of an unnamed capability: ``unnamed_<first 8 hex>``."""
    return f"unnamed_{_hex_prefix(code_hash)}"


def auto_action(code_hash: str) -> str:
    """The action of an unnamed capability: ``exec_<first 8 hex>``."""
    return f"exec_{_hex_prefix(code_hash)}"


def namespace_for_server(server: str) -> str:
    """The namespace a server's tools give a capability (``filesystem`` → ``fs``)."""
    short = SHORT_NAMESPACES.get(server)
    if short is not None:
        return short
    sanitised = _NAMESPACE_UNSAFE.sub("_", server)[:_MAX_COMPONENT]
    return sanitised or DEFAULT_NAMESPACE


def namespace_from_tools(tools_used: Sequence[str]) -> str:
    """The namespace of the first tool's server; ``code`` when there is none."""
    if not tools_used:
        return DEFAULT_NAMESPACE
    server = server_of(tools_used[0])
    return DEFAULT_NAMESPACE if server is None else namespace_for_server(server)


def split_display_name(display_name: str, current_namespace: str) -> tuple[str, str]:
    """The ``(namespace, action)`` a display name gives its MCP tool name.

    ``ns:action`` splits at the first colon and further colons in the action become ``_``.
    Without a usable namespace (no colon, ``:x``) the current namespace is kept; without a
    usable action (``x:``) the non-empty side becomes the action and the current namespace
    is kept. A name made only of colons names no action: ``InvalidName``.
    """
    name = validate_name(display_name)
    if ":" not in name:
        return current_namespace, name
    namespace, _, rest = name.partition(":")
    action = rest.replace(":", "_")
    has_action = rest.strip(":") != ""
    if namespace and has_action:
        return namespace, action
    if namespace:
        return current_namespace, namespace
    if has_action:
        return current_namespace, action
    raise InvalidName(
        f'Invalid capability name: "{message_value(name)}". '
        "Must be alphanumeric with underscores, hyphens, and colons only."
    )


def tool_name_for(namespace: str, action: str) -> str:
    """The MCP tool name of a capability: ``mcp__<namespace>__<action>``, always a valid one.

    Tool names must match ``^[A-Za-z0-9_-]{1,64}$`` (SPEC §3). A longer name (or one with
    other characters) keeps a readable head and ends with 8 hex characters of the SHA-256 of
    the full name, so two different names never shorten to the same tool name.

    >>> tool_name_for("fs", "read_json")
    'mcp__fs__read_json'
    >>> long = tool_name_for("fs", "x" * 80)
    >>> len(long), long[:12], long == tool_name_for("fs", "x" * 81)
    (64, 'mcp__fs__xxx', False)
    """
    full = f"{CAPABILITY_TOOL_PREFIX}{namespace}__{action}"
    if len(full) <= MAX_TOOL_NAME and TOOL_NAME_PATTERN.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_TOOL_DIGEST]
    safe_namespace = _NAMESPACE_UNSAFE.sub("_", namespace)[:_SHORT_NAMESPACE] or DEFAULT_NAMESPACE
    head = f"{CAPABILITY_TOOL_PREFIX}{safe_namespace}__{_NAMESPACE_UNSAFE.sub('_', action)}"
    return f"{head[: MAX_TOOL_NAME - _TOOL_DIGEST - 1]}_{digest}"


def capability_tool_parts(tool_name: str) -> tuple[str, str] | None:
    """``(namespace, action)`` of an ``mcp__<namespace>__<action>`` name, else ``None``."""
    if not tool_name.startswith(CAPABILITY_TOOL_PREFIX):
        return None
    namespace, sep, action = tool_name[len(CAPABILITY_TOOL_PREFIX) :].partition("__")
    if not (sep and namespace and action):
        return None
    return namespace, action


def tool_ref_parts(tool_ref: str) -> tuple[str, str] | None:
    """``(server, tool)`` of a tool reference — ``(namespace, action)`` for a capability;
    ``None`` if it names neither.

    Accepts an FQDN, ``mcp__ns__action``, and ``server:tool``, ``server__tool``,
    ``server.tool``, tried in that order at the first separator found.
    """
    if not isinstance(tool_ref, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        return None
    if is_fqdn(tool_ref):
        fqdn = Fqdn.parse(tool_ref)
        return fqdn.namespace, fqdn.action
    parts = capability_tool_parts(tool_ref)
    if parts is not None:
        return parts
    for separator in (":", "__", "."):
        server, sep, tool = tool_ref.partition(separator)
        if sep:
            return (server, tool) if server and tool else None
    return None


def server_of(tool_ref: str) -> str | None:
    """The server (or capability namespace) a tool reference names; ``None`` if none
    (the forms of ``tool_ref_parts``)."""
    parts = tool_ref_parts(tool_ref)
    return parts[0] if parts is not None else None
