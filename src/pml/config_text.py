"""Reading config files and saying what is wrong with them, in one line.

data = read_config_file(Path("pml.toml"), "TOML")      # ConfigError naming the file
show("a very long server name ...")                    # '"a very long…" (57 characters)'
format_validation_error(error)                         # 'servers.time.command: ...'
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from pml.errors import ConfigError

SHOWN_CHARS = 40
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def read_config_file(path: Path, kind: Literal["TOML", "JSON"]) -> object:
    """The parsed content of a TOML or JSON config file (a ``ConfigError`` naming it)."""
    try:
        text = path.read_bytes().decode("utf-8-sig")  # editors on Windows may add a BOM
        return tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid {kind}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid {kind}: nested too deeply") from None
    except ValueError as error:  # TOMLDecodeError (with its line), or a too-long integer
        raise ConfigError(f"{path}: invalid {kind}: {error}") from None


def format_validation_error(error: ValidationError, *, limit: int = 3) -> str:
    """One line naming each failing field path (``servers.time.command: ...``)."""
    parts: list[str] = []
    for detail in error.errors(include_url=False)[:limit]:
        where = _format_loc(detail["loc"])
        message = detail["msg"].removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden":
            message = "unknown key"
        parts.append(f"{where}: {message}" if where else message)
    hidden = error.error_count() - limit
    if hidden > 0:
        parts.append(f"and {hidden} more")
    return "; ".join(parts)


def show(text: str) -> str:
    """A name quoted for a one-line message: escaped, and cut when long."""
    cut = text[:SHOWN_CHARS]
    escaped = "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in cut
    )
    if len(text) > SHOWN_CHARS:
        return f'"{escaped}…" ({len(text)} characters)'
    return f'"{escaped}"'


def json_kind(value: object) -> str:
    """``an object``, ``an array``, ... for a message about a JSON value."""
    kinds = {"dict": "an object", "list": "an array", "str": "a string", "bool": "a boolean"}
    return "null" if value is None else kinds.get(type(value).__name__, "a number")


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":  # a dict key failed validation: the path already names it
            continue
        else:
            shown = part if _BARE_KEY.fullmatch(part) else show(part)
            text += f".{shown}" if text else shown
    return text
