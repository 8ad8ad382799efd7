"""Parameters of a snippet: ``args`` uses, lifted literals and secrets, and the code edits.

``args["x"]`` makes a required parameter, ``args.get("x")`` an optional one and
``args.get("x", d)`` one defaulting to the literal ``d``. A literal keyword argument of an
``mcp`` call becomes a parameter named after its keyword (``path``, ``path_2``...) whose
default is the literal; the stored code reads ``args["path"]`` instead. Secret-looking
literals become required parameters with no default, wherever they stand.

Example::

    >>> from pml.analysis.code_hash import parse_snippet
    >>> code = 'await mcp.fs.read(path="/a")\\nawait mcp.fs.read(path="/b", n=args.get("n", 3))'
    >>> plan = plan_parameters(scan_snippet(parse_snippet(code), code), code)
    >>> for p in plan.parameters:
    ...     print(p.name, p.schema, p.required, p.source)
    path {'type': 'string', 'default': '/a'} False literal
    path_2 {'type': 'string', 'default': '/b'} False literal
    n {'type': 'integer', 'default': 3} False args
    >>> [edit.text for edit in plan.edits]
    ['args["path"]', 'args["path_2"]']
"""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import dataclass
from typing import Any, Literal

from pml.analysis.credentials import secret_base
from pml.analysis.literals import json_type, literal_key
from pml.analysis.scan import ArgsUse, LiteralUse, Place, Scan, scan_snippet
from pml.analysis.secret_text import holds_secret
from pml.errors import InvalidInput

__all__ = ["Edit", "Parameter", "Plan", "plan_parameters", "scan_snippet", "subscript_text"]

_QUOTES = ('"', "'", '"""', "'''")
_UNQUOTABLE_IN_FSTRING = frozenset("'\"\\\r\n{}")


@dataclass(frozen=True, slots=True)
class Parameter:
    """One property of a snippet's parameters schema."""

    name: str
    schema: dict[str, Any]
    required: bool
    source: Literal["args", "literal", "secret"]


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``code[start:end]`` with ``text``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class Plan:
    parameters: tuple[Parameter, ...]
    edits: tuple[Edit, ...]
    secrets: tuple[tuple[str, str], ...] = ()  # (secret text, parameter) of lifted secrets


def _parses(text: str) -> bool:
    try:
        ast.parse(f"({text})", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def subscript_text(
    code: str,
    place: Place,
    head: str,
    key: str,
    quotes: dict[tuple[int, int], str | None] | None = None,
) -> str | None:
    """``head["key"]`` spelled to replace ``code`` at ``place``; ``None`` if it cannot be.

    Outside f-strings the key is JSON-quoted. Inside one (Python 3.11: no backslashes, no
    reuse of an enclosing quote) the first quote style under which the f-string still parses;
    ``quotes`` caches that choice per innermost f-string, whose enclosing quotes all its
    expressions share, so a long f-string is parsed a few times, not once per edit.
    """
    if not place.editable:
        return None
    if place.fstring is None or place.inner is None:
        return f"{head}[{json.dumps(key, ensure_ascii=False)}]"
    if any(char in _UNQUOTABLE_IN_FSTRING for char in key):
        return None
    cache = quotes if quotes is not None else {}
    if place.inner not in cache:
        root_start, root_end = place.fstring
        cache[place.inner] = next(
            (
                quote
                for quote in _QUOTES
                if _parses(
                    code[root_start : place.start]
                    + f"{head}[{quote}{key}{quote}]"
                    + code[place.end : root_end]
                )
            ),
            None,
        )
    quote = cache[place.inner]
    return None if quote is None else f"{head}[{quote}{key}{quote}]"


def _schema(value: object, *, default: bool) -> dict[str, Any]:
    kind = json_type(value)
    schema: dict[str, Any] = {} if kind is None else {"type": kind}
    if default:
        schema["default"] = copy.deepcopy(value)
    return schema


class _Planner:
    def __init__(self, code: str) -> None:
        self.code = code
        self.parameters: dict[str, tuple[int, Parameter]] = {}  # name -> (first position, ...)
        self.edits: list[Edit] = []
        self.args_values: dict[str, set[str]] = {}  # args parameter -> its literal defaults
        self.quotes: dict[tuple[int, int], str | None] = {}
        self.secrets: dict[str, str] = {}  # secret text -> the parameter that holds it

    def add(self, position: int, parameter: Parameter) -> None:
        self.parameters[parameter.name] = (position, parameter)

    def edit(self, place: Place, key: str, line: int, *, secret: bool) -> bool:
        text = subscript_text(self.code, place, "args", key, self.quotes)
        if text is None:
            if secret:
                raise InvalidInput(
                    "a secret-looking literal cannot be moved out of the code here: "
                    f"pass it in args instead (line {line})",
                    field="code",
                    line=line,
                )
            return False
        self.edits.append(Edit(place.start, place.end, text))
        return True

    def plan_args(self, key: str, uses: list[ArgsUse]) -> None:
        gets = [use for use in uses if use.is_get]
        secrets = [use for use in gets if use.literal and holds_secret(key, use.default)]
        position = min(use.place.start for use in uses)
        if secrets:
            for use in secrets:  # args.get("token", "sk-...") -> args["token"]
                self.edit(use.place, key, use.line, secret=True)
                if isinstance(use.default, str):
                    self.secrets.setdefault(use.default, key)
            self.args_values[key] = {literal_key(use.default) for use in secrets}
            self.add(
                position, Parameter(key, _schema(secrets[0].default, default=False), True, "secret")
            )
            return
        defaults = {literal_key(use.default) for use in gets if use.literal}
        if gets and all(use.literal for use in gets) and len(defaults) == 1:
            self.args_values[key] = defaults
            self.add(
                position, Parameter(key, _schema(gets[0].default, default=True), False, "args")
            )
            return
        required = any(not use.is_get for use in uses)
        self.add(position, Parameter(key, {}, required, "args"))

    def remember(self, name: str, value: object, *, secret: bool) -> None:
        if secret and isinstance(value, str):
            self.secrets.setdefault(value, name)

    def reuses_args_parameter(self, name: str, value: object) -> bool:
        """A literal equal to an ``args`` parameter's default (or secret) means the same."""
        return literal_key(value) in self.args_values.get(name, set[str]())

    def plan_literals(self, uses: list[LiteralUse]) -> None:
        assigned: dict[tuple[str, str], str] = {}
        suffixes: dict[str, int] = {}
        for use in uses:
            secret = not use.kwarg or holds_secret(use.keyword, use.value)
            base = use.keyword if use.kwarg else secret_base(use.keyword)
            identity = (base, literal_key(use.value))
            name = assigned.get(identity)
            if name is None and self.reuses_args_parameter(base, use.value):
                name = base
            if name is not None:
                self.edit(use.place, name, use.line, secret=secret)
                self.remember(name, use.value, secret=secret)
                continue
            name, suffix = base, suffixes.get(base, 1)
            while name in self.parameters:
                suffix += 1
                name = f"{base}_{suffix}"
            if not self.edit(use.place, name, use.line, secret=secret):
                continue  # cannot be replaced where it stands (an f-string): not lifted
            assigned[identity] = name
            self.remember(name, use.value, secret=secret)
            suffixes[base] = suffix  # names are never freed: resume from here next time
            schema = _schema(use.value, default=not secret)
            source: Literal["literal", "secret"] = "secret" if secret else "literal"
            self.add(use.place.start, Parameter(name, schema, secret, source))


def plan_parameters(scan: Scan, code: str) -> Plan:
    """The parameters of a scanned snippet, in source order, and the edits that lift them."""
    planner = _Planner(code)
    groups: dict[str, list[ArgsUse]] = {}
    for use in sorted(scan.args_uses, key=lambda use: use.place.start):
        groups.setdefault(use.key, []).append(use)
    for key, uses in groups.items():
        planner.plan_args(key, uses)
    planner.plan_literals(sorted(scan.literals, key=lambda use: use.place.start))
    ordered = sorted(planner.parameters.values(), key=lambda item: item[0])
    edits = sorted(planner.edits, key=lambda edit: edit.start)
    secrets = tuple(planner.secrets.items())
    return Plan(tuple(parameter for _, parameter in ordered), tuple(edits), secrets)
