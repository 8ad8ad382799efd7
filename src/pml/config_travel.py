"""What makes a config work wherever it is copied and whoever starts PML, from wherever.

Each function takes one raw server entry (the table of ``[servers.NAME]`` or one
``mcpServers`` value, before validation) and returns a new one; values of the wrong type are
left alone for validation to report.

Paths, against ``base`` (the directory of the file that names the server):

- ``cwd``: made absolute when relative.
- With ``cwd`` set the server starts there, so its ``command`` and ``args`` stay as written
  (relative ones are relative to ``cwd``, which travels with the config).
- Without ``cwd``: a ``command`` holding a path separator (``./server.js``, ``bin/x``) is
  made absolute; a bare name (``npx``, ``node``) is looked up on ``PATH`` as always. An arg
  starting with ``./`` or ``../`` is made absolute; so is another relative arg with a path
  separator, not starting with ``-``, that names an existing file or folder under ``base``
  when the config is loaded (``dist/index.js``).
- Absolute paths, ``~`` paths and values starting with ``$`` are never changed.

    >>> resolve_paths({"command": "./srv", "args": ["./a.js", "-y", "pkg"]}, Path("/p"))
    {'command': '/p/srv', 'args': ['/p/a.js', '-y', 'pkg']}
    >>> derived_project(Path("/home/me/My App"))[:7]
    'My-App-'
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from pml.config_expand import expand
from pml.config_text import show

# The fields where ${VAR} is expanded; env and headers expand their values, never their keys.
EXPANDED_FIELDS = ("command", "args", "env", "cwd", "url", "headers")
DEFAULT_PROJECT = "default"
_PROJECT_STEM_CHARS = 40
_NOT_PROJECT_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


class EntryError(ValueError):
    """A field of one server entry that cannot be expanded (``field``: where)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


def resolve_paths(entry: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``entry`` with its relative ``command``, ``args`` and ``cwd`` made absolute."""
    resolved = dict(entry)
    cwd = entry.get("cwd")
    if isinstance(cwd, str):
        if _relative(cwd):
            resolved["cwd"] = _join(base, cwd)
        return resolved  # the server starts in cwd: command and args are relative to it
    command = entry.get("command")
    if isinstance(command, str) and _relative(command) and _has_separator(command):
        resolved["command"] = _join(base, command)
    args = entry.get("args")
    if isinstance(args, list):
        resolved["args"] = [
            _resolved_arg(arg, base) if isinstance(arg, str) else arg
            for arg in cast(list[object], args)
        ]
    return resolved


def expand_entry(
    entry: Mapping[str, Any], environ: Mapping[str, str], *, unset: str | None = None
) -> dict[str, Any]:
    """``entry`` with ``${VAR}`` expanded in :data:`EXPANDED_FIELDS` (``unset``: see
    :func:`pml.config_expand.expand`); an :class:`EntryError` names the failing field."""
    expanded = dict(entry)
    for field in EXPANDED_FIELDS:
        value = entry.get(field)
        try:
            if isinstance(value, str):
                expanded[field] = expand(value, environ, unset=unset)
            elif isinstance(value, list):
                items = cast(list[object], value)
                expanded[field] = [_expand_item(item, environ, unset) for item in items]
        except ValueError as error:
            raise EntryError(field, str(error)) from None
        if isinstance(value, dict):
            table: dict[Any, Any] = {}
            for key, item in cast(dict[Any, Any], value).items():
                try:
                    table[key] = _expand_item(item, environ, unset)
                except ValueError as error:
                    raise EntryError(f"{field} {show(str(key))}", str(error)) from None
            expanded[field] = table
    return expanded


def derived_project(config_dir: Path) -> str:
    """The project of a config that names none: its folder's name, made valid, and a short
    hash of the folder's real path (two folders both named ``app`` stay apart)."""
    real = config_dir.resolve()
    ascii_name = unicodedata.normalize("NFKD", real.name).encode("ascii", "ignore").decode()
    stem = _NOT_PROJECT_CHARS.sub("-", ascii_name).strip("-")[:_PROJECT_STEM_CHARS] or "project"
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:8]
    return f"{stem}-{digest}"


def _expand_item(item: object, environ: Mapping[str, str], unset: str | None) -> object:
    return expand(item, environ, unset=unset) if isinstance(item, str) else item


def _resolved_arg(arg: str, base: Path) -> str:
    if not _relative(arg) or arg.startswith("-"):
        return arg
    if arg.startswith(("./", "../")) or (os.sep != "/" and arg.startswith((".\\", "..\\"))):
        return _join(base, arg)
    if _has_separator(arg) and "://" not in arg and _exists(base / arg):
        return _join(base, arg)
    return arg


def _relative(text: str) -> bool:
    return bool(text) and not os.path.isabs(text) and not text.startswith(("~", "$"))


def _has_separator(text: str) -> bool:
    return any(sep in text for sep in _SEPARATORS)


def _join(base: Path, text: str) -> str:
    return os.path.normpath(base.absolute() / text)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False
