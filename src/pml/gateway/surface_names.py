"""How upstream prompts and resources are named through the gateway, and routed back.

Prompts (and resource names) are namespaced like pass-through tools, ``<server>__<name>``.
Resource URIs and URI templates carry a reversible server marker that keeps them valid URIs:
``pml://<server, percent-encoded>/<upstream URI, unchanged>``.

    >>> mark_uri("everything", "demo://resource/static/document/a.md")
    'pml://everything/demo://resource/static/document/a.md'
    >>> unmark_uri("pml://my%20docs/file:///tmp/x?y#z")
    ('my docs', 'file:///tmp/x?y#z')
    >>> split_name("everything__args-prompt", ["every", "everything"])
    ('everything', 'args-prompt')

The upstream URI follows the marker verbatim, so a marked template expands exactly as the
upstream one does (``pml://everything/demo://resource/dynamic/text/{id}``) and an expanded
URI maps back to the upstream expansion.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, unquote

from pml.upstream.base import PASS_THROUGH_SEPARATOR

MARKER_PREFIX: Final = "pml://"
MAX_URI_CHARS: Final = 16_384
MAX_NAME_CHARS: Final = 1_024


def namespaced(server: str, name: str) -> str:
    """``<server>__<name>``: a prompt's (or resource's) name as clients see it."""
    return f"{server}{PASS_THROUGH_SEPARATOR}{name}"


def split_name(name: str, servers: Iterable[str]) -> tuple[str, str] | None:
    """``(server, name)`` of a namespaced name, the longest matching server first."""
    for server in sorted(servers, key=len, reverse=True):
        prefix = server + PASS_THROUGH_SEPARATOR
        if name.startswith(prefix) and len(name) > len(prefix):
            return server, name[len(prefix) :]
    return None


def mark_uri(server: str, uri: str) -> str:
    """The gateway's URI (or URI template) for ``uri`` of ``server``."""
    return f"{MARKER_PREFIX}{quote(server, safe='')}/{uri}"


def unmark_uri(uri: str) -> tuple[str, str] | None:
    """``(server, upstream URI)`` of a marked URI, else None (the server is not checked)."""
    if not uri.startswith(MARKER_PREFIX):
        return None
    encoded, slash, inner = uri[len(MARKER_PREFIX) :].partition("/")
    if not slash or not encoded or not inner:
        return None
    try:
        server = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        return None
    return server, inner
