"""The spellings agents write for a tool, and the canonical one PML answers with.

Agents often write ``mcp.fs.readJson(...)`` for the capability whose tool is
``mcp__fs__read_json``, or ``mcp.filesystem.readFile`` for the upstream tool ``read_file``.
Planning (``pml.execution.references``) first looks a name up as written (and with
``-``/``.`` written as ``_``, SPEC §4); only when that finds nothing does it compare
*folded* names: camelCase split into snake_case, lower case. A folded match that is unique
is used, and the answer of ``pml_execute`` names the canonical spelling in its
``canonicalSpellings`` field; two or more are ambiguous and stay ``UNKNOWN_TOOL``, listing
them.

    >>> fold("readJSONFile"), fold("get-sum"), fold("ReadFile")
    ('read_json_file', 'get_sum', 'read_file')
    >>> folded_matches(["read_file", "write_file"], "readFile")
    ['read_file']
    >>> capability_variants("readJson")
    ['read_json', 'readjson', 'ReadJson', 'read-json']

Only names an MCP tool name can hold (``^[A-Za-z0-9_-]{1,64}$``) are folded: anything
longer or stranger is simply unknown, whatever it looks like.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FOLDABLE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A word boundary inside camelCase: "readJson" -> read|Json, "JSONFile" -> JSON|File.
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELD = "canonicalSpellings"
"""The ``pml_execute`` answer field listing the references PML respelled."""


def foldable(name: str) -> bool:
    """Whether ``name`` may be compared folded (a plausible MCP tool name)."""
    return FOLDABLE.fullmatch(name) is not None


def fold(name: str) -> str:
    """``name`` in snake_case, lower case, ``-``/``.`` as ``_`` (``readJson`` -> ``read_json``)."""
    spaced = _CAMEL_BOUNDARY.sub("_", name.replace("-", "_").replace(".", "_"))
    return spaced.lower()


def folded_matches(candidates: Sequence[str], written: str) -> list[str]:
    """The candidates whose folded name is ``written`` folded (in their order, unique)."""
    if not foldable(written):
        return []
    key = fold(written)
    return [name for name in dict.fromkeys(candidates) if fold(name) == key]


def capability_variants(action: str) -> list[str]:
    """The spellings of a capability's action worth looking up for ``action`` (not itself):
    snake_case, flat, PascalCase and kebab-case of its folded form."""
    if not foldable(action):
        return []
    snake = fold(action)
    words = [word for word in snake.split("_") if word]
    if not words:
        return []
    variants = [
        snake,
        "".join(words),
        "".join(word[:1].upper() + word[1:] for word in words),
        "-".join(words),
    ]
    if len(words) > 1:
        variants.append(words[0] + "".join(word[:1].upper() + word[1:] for word in words[1:]))
    return [variant for variant in dict.fromkeys(variants) if variant != action]


def call_spelling(namespace: str, name: str) -> str:
    """How a snippet writes a call of ``name`` in ``namespace``: ``mcp.ns.name`` when
    ``name`` is an identifier, else ``mcp.ns["name"]``."""
    if IDENTIFIER.fullmatch(name):
        return f"mcp.{namespace}.{name}"
    return f'mcp.{namespace}["{name}"]'


@dataclass(frozen=True, slots=True)
class Respelling:
    """A reference PML found under another spelling than the one written."""

    written: str  # as in the code: mcp.fs.readJson
    canonical: str  # as it should be written: mcp.fs.read_json
    target: str  # what it designates: fs:read_json (a capability), filesystem:read_file
    line: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "written": self.written,
            "canonical": self.canonical,
            "target": self.target,
            "line": self.line,
            "message": (
                f"{self.written} at line {self.line} was read as {self.canonical} "
                f"({self.target}): write {self.canonical}"
            ),
        }


def notice(respellings: Sequence[Respelling]) -> dict[str, Any]:
    """The answer fields that tell the agent the canonical spellings (empty: none)."""
    if not respellings:
        return {}
    return {FIELD: [respelling.to_dict() for respelling in respellings]}
