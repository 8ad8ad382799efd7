"""Path and URL arguments of a tool call, checked against a grant's path prefix and domain.

    facts = ArgumentFacts.collect({"path": "/data/../etc/passwd", "url": "https://a.example.com"})
    path_refusal(facts, "/data")        # "path '/etc/passwd' outside /data"
    domain_refusal(facts, "example.com")  # None

Arguments are recognised by name at any depth (``path``, ``paths``, ``source``,
``destination``, ``file``, ``dir``, ``directory``, ``root``, ``*_path``... and ``url``,
``uri``, ``href``, ``endpoint``, ``*_url``...). Checks are lexical and fail closed: a path
must be absolute and is normalised with ``posixpath.normpath`` (``..`` cannot escape, and
symlinks are not followed), then matched on whole components, so ``/data`` does not cover
``/data2``. A URL must have a scheme and a host; its host (userinfo stripped, lower case,
IDNA-encoded) must be the domain or one of its subdomains. Values that cannot be read with
certainty (backslashes, control characters, non-strings, very deep or large arguments)
are refused.
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

PATH_KEYS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "filenames",
        "source",
        "sources",
        "src",
        "destination",
        "dest",
        "dst",
        "dir",
        "dirs",
        "directory",
        "directories",
        "root",
        "roots",
        "cwd",
        "folder",
        "workdir",
    }
)
PATH_SUFFIXES = ("path", "paths", "_file", "_files", "_dir", "_dirs", "_directory", "_folder")
NOT_PATHS = frozenset({"xpath", "jsonpath"})
URL_KEYS = frozenset({"url", "urls", "uri", "uris", "href", "endpoint", "link", "links"})
URL_SUFFIXES = ("url", "urls", "_uri", "_uris", "_endpoint", "_href")
MAX_DEPTH = 32
MAX_NODES = 100_000
SHOWN_CHARS = 80


def _kind(key: object) -> str | None:
    if not isinstance(key, str):
        return None
    name = key.lower().replace("-", "_")
    if name in NOT_PATHS:
        return None
    if name in PATH_KEYS or name.endswith(PATH_SUFFIXES):
        return "path"
    if name in URL_KEYS or name.endswith(URL_SUFFIXES):
        return "url"
    return None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True, slots=True)
class ArgumentFacts:
    """The ``(argument name, value)`` pairs that are paths or URLs, and whether the
    arguments could be read completely (``problem`` says why not)."""

    paths: tuple[tuple[str, object], ...]
    urls: tuple[tuple[str, object], ...]
    problem: str | None = None
    # The path arguments normalised once per call (or why one cannot be), for every grant.
    path_checks: tuple[tuple[str, str], ...] | str = ()

    @classmethod
    def collect(cls, arguments: object) -> ArgumentFacts:
        """Walk the arguments (nested objects and lists too) for path and URL values."""
        paths: list[tuple[str, object]] = []
        urls: list[tuple[str, object]] = []
        stack: list[tuple[object, int]] = [(arguments, 0)]
        nodes = 0
        while stack:
            value, depth = stack.pop()
            nodes += 1
            if depth > MAX_DEPTH or nodes > MAX_NODES:
                return cls((), (), "arguments too deep or too large to check")
            if isinstance(value, Mapping):
                items = cast("Mapping[object, object]", value).items()
                for key, item in items:
                    kind = _kind(key)
                    if kind is not None:
                        found = paths if kind == "path" else urls
                        found.extend((str(key), v) for v in _leaves(item))
                    if _container(item):
                        stack.append((item, depth + 1))
            elif isinstance(value, list | tuple):
                items = cast("list[object] | tuple[object, ...]", value)
                stack.extend((item, depth + 1) for item in items if _container(item))
        return cls(tuple(paths), tuple(urls), path_checks=_path_checks(paths))


def _container(value: object) -> bool:
    return isinstance(value, Mapping | list | tuple)


def _leaves(value: object) -> list[object]:
    """The values an argument names: itself, or the items of a list (None: nothing)."""
    if value is None or isinstance(value, Mapping):
        return []  # nested objects are walked for their own named keys
    if isinstance(value, list | tuple):
        items = cast("list[object] | tuple[object, ...]", value)
        return [item for item in items if item is not None and not isinstance(item, Mapping)]
    return [value]


def _unreadable(text: str) -> bool:
    return "\\" in text or any(unicodedata.category(char) == "Cc" for char in text)


def normalise_path(path: str) -> str:
    """``posixpath.normpath`` with leading ``//`` collapsed to ``/`` (lexical, no symlinks)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal


def _path_checks(paths: list[tuple[str, object]]) -> tuple[tuple[str, str], ...] | str:
    """``(argument, normalised path)`` of each path argument, or why one is not a path."""
    checked: list[tuple[str, str]] = []
    for key, value in paths:
        if not isinstance(value, str):
            return f"{key} is not a path string: {_show(value)}"
        if not value.startswith("/"):
            return f"{key} {_show(value)} is not an absolute path"
        if _unreadable(value):
            return f"{key} {_show(value)} contains a backslash or control character"
        checked.append((key, normalise_path(value)))
    return tuple(checked)


def path_refusal(facts: ArgumentFacts, prefix: str) -> str | None:
    """None when every path argument is under ``prefix`` (normalised, as grants store and
    read it), else why not."""
    if facts.problem is not None:
        return facts.problem
    if isinstance(facts.path_checks, str):
        return facts.path_checks
    base = prefix
    for key, normal in facts.path_checks:
        if not (base == "/" or normal == base or normal.startswith(base + "/")):
            return f"{key} {_show(normal)} outside {base}"
    return None


def ascii_host(host: str) -> str | None:
    """A host name lower-cased and IDNA-encoded, trailing dot dropped (None: not a name)."""
    try:
        encoded = host.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None
    return encoded.rstrip(".") or None


def url_host(url: str) -> str | None:
    """The ASCII host of an absolute URL, None when it has none or reads ambiguously."""
    if _unreadable(url) or any(char.isspace() for char in url):
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # an invalid port is an unreadable URL
    except ValueError:
        return None
    if not parts.scheme or not host:
        return None
    return ascii_host(host)


def domain_refusal(facts: ArgumentFacts, domain: str) -> str | None:
    """None when every URL argument's host is ``domain`` or a subdomain, else why not."""
    if facts.problem is not None:
        return facts.problem
    wanted = ascii_host(domain) or "\x00"
    for key, value in facts.urls:
        if not isinstance(value, str):
            return f"{key} is not a URL string: {_show(value)}"
        host = url_host(value)
        if host is None:
            return f"{key} {_show(value)} has no readable host"
        if host != wanted and not host.endswith("." + wanted):
            return f"{key} host {_show(host)} outside {wanted}"
    return None
