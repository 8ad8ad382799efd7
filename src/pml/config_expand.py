"""``${VAR}`` and ``${VAR:-default}`` in server entries, from PML's own environment.

The grammar, the whole of it:

- ``${NAME}``: the value of ``NAME``; unset is an error (:class:`UnsetVariable`).
- ``${NAME:-default}``: the value of ``NAME``, or ``default`` when it is unset or empty.
  The default is literal text up to the first ``}`` (no nesting).
- ``$${``: a literal ``${``. Any other ``$`` (``$HOME``, ``$$``, a price) stays as written.
- ``NAME`` is ASCII letters, digits and ``_``, not starting with a digit (a POSIX name).

Values are inserted as they are: a value that itself holds ``${...}`` is not expanded again.

    >>> expand("Bearer ${TOKEN}", {"TOKEN": "t0k"})
    'Bearer t0k'
    >>> expand("${HOST:-localhost}:8080 costs $5, $${KEEP}", {})
    'localhost:8080 costs $5, ${KEEP}'
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pml.config_text import show

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = "$${"
_OPEN = "${"


class ExpansionError(ValueError):
    """A ``${...}`` that cannot be expanded (the message says why, in one line)."""


class UnsetVariable(ExpansionError):
    """``${NAME}`` without a default, and ``NAME`` is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"variable {name} is not set in PML's environment "
            f"(set it, or give a default: ${{{name}:-value}})"
        )
        self.name = name


def expand(text: str, environ: Mapping[str, str], *, unset: str | None = None) -> str:
    """``text`` with its references replaced from ``environ``.

    ``unset``: what an unset variable without a default stands for (to check a value's
    shape without reading anyone's environment); ``None`` makes it an :class:`UnsetVariable`.
    """
    if "$" not in text:
        return text
    parts: list[str] = []
    start = 0
    while (dollar := text.find("$", start)) >= 0:
        parts.append(text[start:dollar])
        if text.startswith(_ESCAPE, dollar):
            parts.append(_OPEN)
            start = dollar + len(_ESCAPE)
            continue
        if not text.startswith(_OPEN, dollar):
            parts.append("$")
            start = dollar + 1
            continue
        close = text.find("}", dollar + len(_OPEN))
        if close < 0:
            raise ExpansionError(
                f"unterminated '${{' at character {dollar + 1}: "
                "write ${NAME}, or $${ for a literal '${'"
            )
        parts.append(_value(text[dollar + len(_OPEN) : close], environ, unset))
        start = close + 1
    parts.append(text[start:])
    return "".join(parts)


def references(text: str) -> bool:
    """Whether ``text`` holds a ``${`` (a reference or its escape) that expansion changes."""
    return _OPEN in text


def _value(body: str, environ: Mapping[str, str], unset: str | None) -> str:
    name, has_default, default = body.partition(":-")
    if _OPEN in body:
        raise ExpansionError(f"nested references are not supported: {show('${' + body + '}')}")
    if not _NAME.fullmatch(name):
        raise ExpansionError(
            f"{show('${' + body + '}')} is not a reference PML expands: write ${{NAME}} or "
            "${NAME:-default}, NAME made of ASCII letters, digits and _"
        )
    value = environ.get(name)
    if has_default:
        return value if value else default
    if value is not None:
        return value
    if unset is not None:
        return unset
    raise UnsetVariable(name)
