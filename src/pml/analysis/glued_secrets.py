"""A credential cut in two where folding cannot follow: a known start glued on at run time.

``"ghp_" + rest.replace("-", "")``, ``"ghp_%.36s" % rest``, ``"{}{}".format(*parts)``,
``"".join(x for x in parts)``, two constants in two statements: ``folding`` evaluates only
plain concatenation, so the pieces are judged one by one, and neither alone looks like a
credential (the rest may be plain hex, which ids and digests are too). But a constant that
is exactly a credential's known start (``"ghp_"``, ``"sk-"``, ``"AKIA"``: ``TOKEN_PREFIX``;
``"ghp_%.36s"`` too), in code that also holds a token-like constant (16 or more letters and
digits, with a digit), glues a credential together whatever the operation: capture refuses
such code. A start that is only compared or searched for (``key.startswith("sk-")``,
``"ghp_" in text``) is a check, not a piece.

Example::

    >>> import ast
    >>> glued_prefix(ast.parse('t = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"[:36]'))
    1
    >>> glued_prefix(ast.parse('ok = key.startswith("ghp_") and len(key) == 40')) is None
    True
"""

from __future__ import annotations

import ast
import re
from typing import Final

from pml.analysis.token_shapes import TOKEN_PREFIX

_TOKEN_LIKE: Final = re.compile(r"[A-Za-z0-9_\-]{16,256}")
# ``"ghp_%.36s"``, ``"ghp_{}"``: a start with the rest left to a formatting field.
_FIELD: Final = re.compile(r"%[-#0 +]{0,4}[0-9]{0,4}(?:\.[0-9]{1,4})?[a-z]|\{[^{}]{0,64}\}")
# Methods whose text arguments are searched for, not built into a value.
_SEARCHES: Final = frozenset(
    {"startswith", "endswith", "removeprefix", "removesuffix", "find", "rfind", "index"}
    | {"rindex", "count", "split", "rsplit", "partition", "rpartition", "strip", "lstrip"}
    | {"rstrip", "match", "fullmatch", "search"}
)


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def _checked(tree: ast.AST) -> set[int]:
    """The ids of the constants the code only compares or searches for."""
    checked: set[int] = set()
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SEARCHES
        ):
            operands = list(node.args)
        for operand in operands:
            parts = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else []
            checked.update(id(part) for part in [operand, *parts])
    return checked


def _token_like(text: str) -> bool:
    return (
        _TOKEN_LIKE.fullmatch(text) is not None
        and any(char.isdigit() for char in text)
        and any(char.isalpha() for char in text)
    )


def glued_prefix(tree: ast.AST) -> int | None:
    """The line of a credential's start that the code glues to a token-like constant."""
    checked = _checked(tree)
    starts: list[int] = []
    token = False
    for node in ast.walk(tree):
        text = _text(node)
        if text is None:
            continue
        if TOKEN_PREFIX.fullmatch(_FIELD.sub("", text).strip()) is not None:
            if id(node) not in checked:
                starts.append(getattr(node, "lineno", 1))
        elif _token_like(text):
            token = True
    return min(starts) if starts and token else None
