"""``server:tool`` patterns: the globs of permission rules and grant scopes.

    split_pattern("fs:write_*")    # ("fs", "write_*")
    split_pattern("*")             # ("*", "*"): every tool of every server
    glob_regex("write_[!a]*")      # regex source, same meaning as fnmatch.fnmatchcase

The pattern splits at its first ``:``; both parts must be non-empty. Globs are
case-sensitive and ``*`` crosses no boundary other than the part it is in.
"""

from __future__ import annotations

import functools
import re

MAX_PATTERN_LENGTH = 1000


class BadPattern(ValueError):
    """A ``server:tool`` pattern that cannot be used; the message says why."""


def split_pattern(pattern: object) -> tuple[str, str]:
    """``(server_glob, tool_glob)`` of a ``server:tool`` pattern (``*`` alone: ``*:*``)."""
    if not isinstance(pattern, str):
        raise BadPattern(f"{pattern!r} is not a string")
    if pattern == "*":
        return "*", "*"
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise BadPattern(f"{pattern[:40]!r}... is longer than {MAX_PATTERN_LENGTH} characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in pattern):
        raise BadPattern(f"{pattern!r} contains control characters")
    server, colon, tool = pattern.partition(":")
    if not colon:
        raise BadPattern(f"{pattern!r} has no ':'; write it as server:tool (e.g. 'fs:*')")
    if not server or not tool:
        raise BadPattern(f"{pattern!r} has an empty server or tool part")
    for part in (server, tool):
        if "[" not in part:
            continue  # only a character class can make an invalid regex
        try:
            re.compile(glob_regex(part))
        except re.error as error:
            raise BadPattern(f"{pattern!r} is not a valid glob: {error}") from None
    return server, tool


def glob_regex(glob: str) -> str:
    """The regex source matching what ``fnmatch.fnmatchcase`` matches for ``glob``.

    Only non-capturing constructs are produced, so alternatives can be numbered by group.
    """
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        char = glob[i]
        i += 1
        if char == "*":
            while i < n and glob[i] == "*":
                i += 1
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            end = i + 1 if i < n and glob[i] == "!" else i
            end = glob.find("]", end + 1 if end < n and glob[end] == "]" else end)
            if end < 0:
                out.append(r"\[")
                continue
            body, i = glob[i:end], end + 1
            negate = body.startswith("!")
            chars = "".join(c if c == "-" else re.escape(c) for c in body[negate:])
            out.append(f"[{'^' if negate else ''}{chars}]")
        else:
            out.append(re.escape(char))
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def tool_matcher(pattern: str) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """Compiled ``(server, tool)`` regexes of a pattern, None when it is malformed."""
    try:
        server, tool = split_pattern(pattern)
    except BadPattern:
        return None
    return re.compile(glob_regex(server), re.S), re.compile(glob_regex(tool), re.S)
