"""JSON literals in snippet code: which expressions can become parameter defaults.

A liftable literal is what ``ast.literal_eval`` accepts and JSON can carry: strings, integers,
finite floats, booleans, ``None`` (negative numbers too), and lists, tuples (stored as lists)
and string-keyed dicts of those. Sets, bytes, complex numbers, ``inf``/``nan`` and deeper
than ``MAX_DEPTH`` levels are not literals here.

Example::

    >>> import ast
    >>> literal_value(ast.parse("[-1, (2.5, None), {'a': True}]", mode="eval").body)
    (True, [-1, [2.5, None], {'a': True}])
    >>> literal_value(ast.parse("{1, 2}", mode="eval").body)
    (False, None)
    >>> json_type("x"), json_type(True), json_type(3), json_type(None), json_type(object())
    ('string', 'boolean', 'integer', 'null', None)
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

MAX_DEPTH = 100
MAX_INT_BITS = 4096

_NOT_LITERAL: tuple[bool, Any] = (False, None)


def _number(node: ast.expr) -> tuple[bool, Any]:
    negate = False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        negate = isinstance(node.op, ast.USub)
        node = node.operand
    if not isinstance(node, ast.Constant):
        return _NOT_LITERAL
    value: object = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _NOT_LITERAL
    if isinstance(value, float) and not math.isfinite(value):
        return _NOT_LITERAL
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        return _NOT_LITERAL  # too long to print as a JSON number
    return True, -value if negate else value


def literal_value(node: ast.expr, depth: int = 0) -> tuple[bool, Any]:
    """``(True, value)`` when ``node`` is a JSON literal, else ``(False, None)``."""
    if depth > MAX_DEPTH:
        return _NOT_LITERAL
    if isinstance(node, ast.Constant):
        value: object = node.value
        if value is None or isinstance(value, str | bool):
            return True, value
        return _number(node)
    if isinstance(node, ast.UnaryOp):
        return _number(node)
    if isinstance(node, ast.List | ast.Tuple):
        items: list[Any] = []
        for element in node.elts:
            ok, item = literal_value(element, depth + 1)
            if not ok:
                return _NOT_LITERAL
            items.append(item)
        return True, items
    if isinstance(node, ast.Dict):
        mapping: dict[str, Any] = {}
        for key, element in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return _NOT_LITERAL  # ``**splat`` (key None) or a non-string key
            ok, item = literal_value(element, depth + 1)
            if not ok:
                return _NOT_LITERAL
            mapping[key.value] = item
        return True, mapping
    return _NOT_LITERAL


def literal_key(value: object) -> str:
    """A canonical text of a JSON value: equal for equal values, ``1`` differs from ``1.0``."""
    return json.dumps(value, sort_keys=True, allow_nan=False)


def json_type(value: object) -> str | None:
    """The JSON Schema type of a literal value (``None`` when it is not JSON)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None
