"""What a person sees of a tool call waiting for approval (SPEC §10.5).

``argument_view`` lists every argument (``name``, ``value``, ``bytes``, ``truncated``,
``target``), targets first: 10 KB of ``content`` cannot push the ``path`` out of sight.

    >>> view = argument_view({"content": "x" * 10240, "path": "/srv/app/main.py"})
    >>> [(item["name"], item["bytes"], item["truncated"]) for item in view]
    [('path', 16, False), ('content', 10240, True)]
    >>> render_arguments(view)[0]
    '▶ path: /srv/app/main.py'

A **target** says where a call acts or what it runs: the last word of its name (split on
``_ - .`` and camelCase; plural or numbered alike) is a place word (path, file, dir, url,
host, repo, bucket, table, db, to, source, dst, command...: ``output_file``, ``targetPath``),
one glued to a qualifier (``outfile``, ``abspath``) or a naming word after one
(``file_name``, ``repo_id``); ``args`` after a command word or beside a command; never a
credential name. ``TARGET_NAMES`` lead in order, then other targets, then the rest by name.

Strings show as written, other values as compact JSON (sorted keys, ``…`` for what is too
deep, wide or long). Misleading characters (categories C*, Zl, Zp, Zs but space, enclosing
or stacked marks, blank fillers, and the ``…``/``▶`` this view writes) become ``\\n`` or
``\\uXXXX``; backslashes stay (Windows paths). Over 160 characters (2048 for a target) a
value shows head ``… [N bytes] …`` tail, never half an escape. Non-targets are scrubbed;
targets are not (random-looking path parts would vanish) but lose URL passwords and
``?token=`` values. After ``MAX_ARGUMENTS``, one ``…`` item counts the rest.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Collection, Mapping
from itertools import accumulate, islice
from pathlib import PurePath
from typing import Any, Final, cast

from pml.analysis.credentials import is_secret_keyword, keyword_words
from pml.errors import ApprovalRequired
from pml.policy.scrub import REDACTED, scrub

TARGET_NAMES: Final = (
    *("path", "paths", "source", "destination", "url", "uri", "repo_path"),
    *("command", "cmd", "argv", "args", "cwd"),
)
MAX_ARGUMENTS: Final = 50
VALUE_CHARS: Final = 160
TARGET_CHARS: Final = 2048
HEAD_CHARS: Final = 100
TAIL_CHARS: Final = 40
NAME_CHARS: Final = 64
_KEY_CHARS: Final = 256  # of a name, read to classify and sort it
_WINDOW: Final = 4096  # raw characters read from each end of a long string
_MAX_DEPTH: Final = 32
_MAX_ITEMS: Final = 256

_COMMANDS = frozenset({"command", "commands", "cmd", "cmds", "cmdline", "argv", "executable"})
_PLACES = _COMMANDS | {
    *("path", "pathname", "file", "filename", "dir", "directory", "directories", "folder"),
    *("cwd", "root", "url", "uri", "href", "link", "endpoint", "webhook", "host", "hostname"),
    *("server", "dest", "dst", "destination", "target", "to", "source", "src", "repo", "db"),
    *("repository", "repositories", "bucket", "table", "database", "location", "recipient"),
    *("cc", "bcc", "channel"),
}
_GLUED = ("path", "file", "dir", "url", "name")  # written after a qualifier: outfile, abspath
_QUALIFIERS = {
    *("abs", "base", "dir", "dst", "dest", "file", "host", "in", "input", "local", "log", "out"),
    *("output", "path", "rel", "remote", "root", "src", "sub", "temp", "tmp", "work"),
}
_NAMING = frozenset({"name", "names", "id", "ids", "list", "prefix"})
_ARGS = frozenset({"args", "arguments"})
_INVISIBLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2026\u25b6\u2800\u3164\ufe00-\ufe0f"
    "\uffa0\U000e0100-\U000e01ef]"
)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/?#\s:@]{0,256}:)[^/?#\s@]{1,256}@")
_QUERY_VALUE = re.compile(r"([?&;]([A-Za-z0-9_.\-]{1,64})=)[^&#\s\"']{1,4096}")


def is_target(name: str) -> bool:
    """Whether an argument called ``name`` says where the call acts or what it runs."""
    name = str.__str__(name)[:_KEY_CHARS]
    words = keyword_words(name.rstrip("0123456789"))  # file_2, path2: numbered places
    if not words or is_secret_keyword(name):
        return False
    *qualifiers, head = words
    named = head in _NAMING and bool(qualifiers) and _place(qualifiers[-1])
    return _place(head) or named or (head in _ARGS and not _COMMANDS.isdisjoint(qualifiers))


def _place(word: str) -> bool:
    word = word.removesuffix("s")  # plurals: paths, files, urls, sources, repos, cmds
    glued = any(word.endswith(end) and word[: -len(end)] in _QUALIFIERS for end in _GLUED)
    return glued or word in _PLACES


def argument_view(arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every argument as a person reviews it: targets first, escaped, bounded, scrubbed."""
    named = [
        (key, value, "_".join(keyword_words(key[:_KEY_CHARS])) if isinstance(key, str) else "")
        for key, value in cast("Mapping[object, object]", arguments).items()
    ]
    runs = any(normal.rsplit("_", 1)[-1] in _COMMANDS and is_target(normal) for *_, normal in named)
    entries: list[tuple[tuple[int, int, str], object, object, bool]] = []
    for key, value, normal in named:
        target = isinstance(key, str) and (is_target(key) or (runs and normal in _ARGS))
        rank = TARGET_NAMES.index(normal) if target and normal in TARGET_NAMES else 99
        entries.append(((0 if target else 1, rank, _text(key)), key, value, target))
    entries.sort(key=lambda entry: entry[0])  # targets first: never the ones dropped
    view = [_item(key, value, target) for _, key, value, target in entries[:MAX_ARGUMENTS]]
    if len(entries) > MAX_ARGUMENTS:
        targets = sum(1 for entry in entries[MAX_ARGUMENTS:] if entry[3])
        text = f"{len(entries) - MAX_ARGUMENTS} more arguments"
        text += f", {targets} of them targets" if targets else ""
        view.append(_entry("…", text, len(text.encode()), truncated=True, target=targets > 0))
    return view


def render_arguments(items: list[dict[str, Any]]) -> list[str]:
    """Lines ``▶ path: /tmp/x`` (target) or ``  content: ...``; raw characters never pass."""
    lines = (f"{'▶ ' if i.get('target') else '  '}{i.get('name')}: {i.get('value')}" for i in items)
    return ["".join(c if c.isprintable() else _escaped(c) for c in line) for line in lines]


def _entry(name: str, value: str, size: int, *, truncated: bool, target: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "bytes": size, "truncated": truncated, "target": target}


def _item(key: object, value: object, target: bool) -> dict[str, Any]:
    if isinstance(value, str):
        text = str.__str__(value)
        size = len(text.encode("utf-8", "surrogatepass"))
        scrub_part: Callable[[str], str] = lambda part: str(_scrubbed(key, part))  # noqa: E731
        clean = _hide_credentials if target else scrub_part
        head = _escape(clean(text[:_WINDOW]))
        tail = _escape(clean(text[-_WINDOW:])) if len(text) > _WINDOW else head
    else:
        scrubbed = value if target else _scrubbed(key, value)
        plain = value if isinstance(value, int | float) else scrubbed  # a number: NaN stays NaN
        tokens = _Json(plain, _hide_credentials if target else str).tokens
        head = tail = [REDACTED] if not target and scrubbed == REDACTED else tokens
        size = len("".join(head).encode())
    cut = tail is not head or sum(map(len, head)) > (TARGET_CHARS if target else VALUE_CHARS)
    ending = _take(tail, TAIL_CHARS, end=True)
    shown = f"{_take(head, HEAD_CHARS)} … [{size} bytes] … {ending}" if cut else "".join(head)
    name = _escape(_text(key)[: NAME_CHARS + 1])
    if sum(map(len, name)) > NAME_CHARS:
        name = [_take(name, NAME_CHARS - 1), "…"]
    return _entry("".join(name), shown, size, truncated=cut, target=target)


def _take(tokens: list[str], limit: int, *, end: bool = False) -> str:
    """Whole tokens up to ``limit`` characters from the start (or end): never half an escape."""
    sizes = accumulate(map(len, tokens[::-1] if end else tokens))
    count = sum(1 for size in sizes if size <= limit)
    return "".join(tokens[len(tokens) - count :] if end else tokens[:count])


def _text(value: object) -> str:
    if isinstance(value, str):
        return str.__str__(value)[:_KEY_CHARS]
    if isinstance(value, int) and int.bit_length(value) > 128:  # str() refuses huge numbers
        return f"<integer of {int.bit_length(value)} bits>"
    known = value is None or isinstance(value, int | float)
    return json.dumps(value) if known else f"<{type(value).__name__}>"


def _scrubbed(key: object, value: object) -> object:
    # Under its name, so that the value of a ``password`` goes too.
    return next(iter(cast("dict[str, object]", scrub({key: value})).values()))


def _hide_credentials(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m[1]}{REDACTED}@", text)
    return _QUERY_VALUE.sub(lambda m: m[1] + REDACTED if is_secret_keyword(m[2]) else m[0], text)


def _escape(text: str, *, quoted: bool = False) -> list[str]:
    """One display token per character; a character that could mislead becomes an escape."""
    tokens: list[str] = []
    marks = 0
    for char in text:
        kind = "" if " " <= char <= "~" else unicodedata.category(char)  # ASCII: the fast path
        marks = marks + 1 if kind == "Mn" else 0
        hidden = kind and (not char.isprintable() or kind == "Me" or marks > 2)
        if hidden or _INVISIBLE.match(char):
            tokens.append(_escaped(char))
        else:
            tokens.append("\\" + char if quoted and char in '"\\' else char)
    return tokens


def _escaped(char: str) -> str:
    short = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return short or (f"\\u{ord(char):04x}" if char < "\U00010000" else f"\\U{ord(char):08x}")


class _Json:
    """Compact JSON as display tokens; what is too deep, wide or long becomes ``…``."""

    def __init__(self, value: object, clean: Callable[[str], str]) -> None:
        self.tokens: list[str] = []
        self.chars = 4 * _WINDOW
        self.clean = clean
        self.value(value, 0)

    def add(self, *tokens: str) -> None:
        self.tokens.extend(tokens)
        self.chars -= sum(map(len, tokens))

    def value(self, value: object, depth: int) -> None:
        nested = isinstance(value, Mapping | list | tuple | set | frozenset)
        if self.chars <= 0 or (nested and depth >= _MAX_DEPTH):
            self.add("…")
        elif nested:
            self.nested(cast("Collection[object]", value), depth)
        elif isinstance(value, str | PurePath):
            self.string(str.__str__(value) if isinstance(value, str) else str(value))
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(cast("bytes", value))  # a memoryview's items may be wider than bytes
            text = data[:_WINDOW].decode("utf-8", "backslashreplace")
            self.string(text, "b", cut=len(data) > _WINDOW)
        else:
            self.add(*_escape(_text(value)))

    def nested(self, value: Collection[object], depth: int) -> None:
        keyed = isinstance(value, Mapping)
        if keyed:
            pairs = islice(cast("Mapping[object, object]", value).items(), _MAX_ITEMS)
            entries = sorted(((_text(k), v) for k, v in pairs), key=lambda kv: kv[0])
        else:
            entries = [("", item) for item in islice(value, _MAX_ITEMS)]
        self.add("{" if keyed else "[")
        for index, (key, item) in enumerate(entries):
            self.add("," if index else "")
            if self.chars <= 0:
                self.add("…")
                break
            if keyed:
                self.string(key)
                self.add(":")
            self.value(item, depth + 1)
        more = len(value) - _MAX_ITEMS
        self.add(f",… {more} more" if more > 0 else "", "}" if keyed else "]")

    def string(self, text: str, prefix: str = "", *, cut: bool = False) -> None:
        room = max(min(self.chars, _WINDOW), 0)
        # Cleaned past the cut: a password across it still goes.
        shown = _escape(self.clean(text[: room + 1024])[:room], quoted=True)
        self.add(prefix, '"', *shown, "…" if cut or len(text) > room else "", '"')


ARGS_SUMMARY_CHARS = 200


# What an ApprovalRequired carries for the paused workflow only, never in a refusal.
_WORKFLOW_ONLY = frozenset({"args_digest", "arguments", "server"})


def refusal_data(waiting: ApprovalRequired) -> dict[str, Any]:
    """The data of an approval that cannot wait, as a ``PERMISSION_DENIED``'s data."""
    return {k: v for k, v in waiting.data.items() if k not in _WORKFLOW_ONLY}


def args_summary(arguments: Mapping[str, Any]) -> str:
    """The arguments as a person reviews them: secrets scrubbed, at most 200 characters."""
    text = json.dumps(scrub(dict(arguments)), ensure_ascii=False, default=str, sort_keys=True)
    if len(text) > ARGS_SUMMARY_CHARS:
        return text[: ARGS_SUMMARY_CHARS - 1] + "…"
    return text
