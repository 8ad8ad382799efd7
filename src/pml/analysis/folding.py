"""The text an expression of constants spells, so that a secret cut in pieces is still seen.

``folded_text(node)`` evaluates, without running anything, the few ways code glues constant
text together: implicit concatenation (already one constant in the AST), ``+``,
``"".join([...])``, ``%`` with plain ``%s``/``%d``/``%r`` fields, ``.format`` with plain
``{}``/``{0}``/``{name}`` fields, f-strings whose every part is constant, ``bytes.fromhex``,
and ``.encode()``/``.decode()``/``.lower()``/``.upper()``/``.strip()`` of those. Anything
else (a name, a call, a width such as ``%999999d``) is not constant: ``None``. Results are
capped at ``MAX_FOLDED`` characters and nesting at ``MAX_DEPTH``, so hostile code cannot
make the analysis build a large value. What a computation outside this list spells (base64,
``codecs``, a loop) is not followed; such a secret's pieces are still judged one by one.

Example::

    >>> import ast
    >>> folded_text(ast.parse('"sk-" + "".join(["abc", "def"]) + "%s" % "!"', mode="eval").body)
    'sk-abcdef!'
    >>> folded_text(ast.parse('bytes.fromhex("736b2d")', mode="eval").body)
    b'sk-'
    >>> folded_text(ast.parse('"a" + name', mode="eval").body) is None
    True
"""

from __future__ import annotations

import ast
import re
import string
from typing import Final

from pml.analysis.secret_text import secret_spans

MAX_FOLDED: Final = 65_536
MAX_DEPTH: Final = 64

_PERCENT_FIELD = re.compile(r"%(.)", re.DOTALL)
_SIMPLE_FIELD = re.compile(r"[0-9]*|[A-Za-z_][A-Za-z0-9_]*")
_TEXT_METHODS = frozenset({"lower", "upper", "strip", "lstrip", "rstrip"})

Text = str | bytes


def _small(value: object) -> Text | None:
    if isinstance(value, str | bytes) and len(value) <= MAX_FOLDED:
        return value
    return None


def _short(value: str) -> str | None:
    return value if len(value) <= MAX_FOLDED else None


def _scalar(node: ast.expr, depth: int) -> str | bytes | int | None:
    """A folded text, or an integer constant (``%d``/``format`` arguments)."""
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 10**18:
        return node.value
    return _fold(node, depth)


def _percent(template: str, node: ast.expr, depth: int) -> str | None:
    values = node.elts if isinstance(node, ast.Tuple) else [node]
    arguments = [_scalar(value, depth) for value in values]
    if any(argument is None or isinstance(argument, bytes) for argument in arguments):
        return None
    fields = [match[1] for match in _PERCENT_FIELD.finditer(template)]
    if any(field not in "sdr%" for field in fields):  # widths, precisions, mappings: no
        return None
    if len([field for field in fields if field != "%"]) != len(arguments):
        return None
    try:
        return _short(template % tuple(arguments))
    except (TypeError, ValueError):  # ``%d`` of a text
        return None


def _format(template: str, call: ast.Call, depth: int) -> str | None:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for _, name, spec, conversion in parsed:
        if name is not None and (spec or conversion or not _SIMPLE_FIELD.fullmatch(name)):
            return None
    positional = [_scalar(argument, depth) for argument in call.args]
    named = {k.arg: _scalar(k.value, depth) for k in call.keywords if k.arg is not None}
    values = [*positional, *named.values()]
    if len(named) != len(call.keywords) or any(
        value is None or isinstance(value, bytes) for value in values
    ):
        return None
    fields = sum(1 for _, name, _, _ in parsed if name is not None)
    longest = max((len(str(value)) for value in values), default=0)
    if len(template) + fields * longest > MAX_FOLDED:  # ``{0}`` may repeat a long argument
        return None
    try:
        return _short(template.format(*positional, **named))
    except (IndexError, KeyError, ValueError):
        return None


def _method(call: ast.Call, method: str, depth: int) -> Text | None:
    owner = call.func.value if isinstance(call.func, ast.Attribute) else None
    if owner is None:
        return None
    if method == "fromhex" and isinstance(owner, ast.Name) and owner.id in {"bytes", "bytearray"}:
        argument = _fold(call.args[0], depth) if len(call.args) == 1 else None
        try:
            return bytes.fromhex(argument) if isinstance(argument, str) else None
        except ValueError:
            return None
    base = _fold(owner, depth)
    if method == "format" and isinstance(base, str):
        return _format(base, call, depth)
    if base is None or call.keywords:
        return None
    if method == "join" and len(call.args) == 1 and isinstance(call.args[0], ast.List | ast.Tuple):
        parts = [_fold(element, depth) for element in call.args[0].elts]
        sizes = [len(part) for part in parts if part is not None]
        if len(base) * len(parts) + sum(sizes) > MAX_FOLDED:  # a separator repeated: cap first
            return None
        texts = [part for part in parts if isinstance(part, str)]
        if isinstance(base, str) and len(texts) == len(parts):
            return _small(base.join(texts))
        data = [part for part in parts if isinstance(part, bytes)]
        if isinstance(base, bytes) and len(data) == len(parts):
            return _small(base.join(data))
        return None
    if call.args:
        return None
    if method in _TEXT_METHODS:
        return getattr(base, method)()
    if method == "encode" and isinstance(base, str):
        return base.encode("utf-8", "surrogatepass")
    if method == "decode" and isinstance(base, bytes):
        return base.decode("utf-8", "replace")
    return None


def _fold(node: ast.expr, depth: int) -> Text | None:
    depth += 1
    if depth > MAX_DEPTH:
        return None
    if isinstance(node, ast.Constant):
        return _small(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left, depth), _fold(node.right, depth)
        if isinstance(left, str) and isinstance(right, str):
            return _small(left + right)
        if isinstance(left, bytes) and isinstance(right, bytes):
            return _small(left + right)
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = _fold(node.left, depth)
        return _percent(left, node.right, depth) if isinstance(left, str) else None
    if isinstance(node, ast.JoinedStr):
        return _joined(node, depth)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return _method(node, node.func.attr, depth)
    return None


def _joined(node: ast.JoinedStr, depth: int) -> str | None:
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.FormattedValue):
            if value.conversion != -1 or value.format_spec is not None:
                return None
            value = value.value
        part = _fold(value, depth)
        if not isinstance(part, str):
            return None
        parts.append(part)
    return _short("".join(parts))


def folded_text(node: ast.expr) -> Text | None:
    """The ``str`` or ``bytes`` that ``node`` always evaluates to, when it is built of
    constants in one of the ways listed in the module doc; ``None`` otherwise."""
    return _fold(node, 0)


def is_compound(node: ast.expr) -> bool:
    """Whether ``node`` is one of the folded forms (not a lone constant)."""
    return isinstance(node, ast.BinOp | ast.JoinedStr | ast.Call)


def _text(value: Text) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def split_secret(node: ast.AST) -> bool:
    """Whether ``node`` glues constants into a credential that no smaller part of it spells
    (``"ghp_A1" + "b2..."``, ``"".join([...])``, ``f"ghp_A1{'b2...'}"``): such an
    expression is lifted whole, since lifting one piece would leave the others, and part of
    the credential, in the stored code. A part that spells a whole credential can be lifted
    alone (``"token=%s" % "sk-..."`` keeps its template)."""
    if not isinstance(node, ast.expr) or not is_compound(node):
        return False
    value = folded_text(node)
    if value is None:
        return False
    text = _text(value)
    spans = secret_spans(text)
    if not spans:
        return False
    parts = [
        _text(folded)
        for part in ast.walk(node)
        if part is not node
        and isinstance(part, ast.expr)
        and (folded := folded_text(part)) is not None
    ]
    return any(not any(text[start:end] in part for part in parts) for start, end in spans)
