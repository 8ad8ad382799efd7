"""Where a credential's text comes from, as ``credential_flow`` follows it back.

An ``Origin`` is another name (a ``str``), an element of one (``Item``: ``creds["p"]``), or
an expression written in place (``Literal``: ``["..."]`` in ``for pw in ["..."]``, the value
a local function returns). ``pieces(value)`` lists the origins of a credential's value: its
names, the parts of an f-string, a ``+`` or a ``%``, the elements of a tuple or list, both
sides of ``x if c else y`` and ``a or b``, what a text transform is applied to
(``str(x)``, ``x.strip()``, ``"".join(reversed(x))``, ``b64encode(x).decode()``, a slice),
and what a function defined in the snippet returns (``get_pw()``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# A key into a container: a dict key or list index, ``None`` for "any element".
Key = str | int | None
Path = tuple[Key, ...]
MAX_PATH = 6  # keys followed into nested containers; deeper, an element is taken whole


@dataclass(frozen=True)
class Item:
    """An element of what ``name`` holds: ``name[path[0]][path[1]]...``."""

    name: str
    path: Path


@dataclass(frozen=True)
class Literal:
    """An element of a container written in place (``for pw in ["..."]``)."""

    node: ast.expr
    path: Path


Origin = str | Item | Literal  # where a name's value comes from (a str: another name)


def origin_of(value: ast.expr) -> Origin | None:
    """Where ``value`` comes from: a name, what a local function returns (``f()``), an
    element of either (``x[k]``, ``x.get(k)``, ``f()["k"]``). Past ``MAX_PATH`` keys, the
    element that deep is taken whole."""
    path: list[Key] = []
    while True:
        name = value.id if isinstance(value, ast.Name) else _called(value)
        if name is not None:
            return Item(name, tuple(reversed(path))[:MAX_PATH]) if path else name
        if isinstance(value, ast.Subscript) and not isinstance(value.slice, ast.Slice):
            path.append(key_of(value.slice))
            value = value.value
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in ("get", "pop")
            and value.args
        ):
            path.append(key_of(value.args[0]))
            value = value.func.value
        else:
            return None


def extend(origin: Origin, path: Path) -> Origin:
    """``origin[path]``; past ``MAX_PATH`` keys, the element that deep is taken whole."""
    if isinstance(origin, str):
        return Item(origin, path[:MAX_PATH])
    if isinstance(origin, Item):
        return Item(origin.name, (origin.path + path)[:MAX_PATH])
    return Literal(origin.node, (origin.path + path)[:MAX_PATH])


def key_of(node: ast.expr) -> Key:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int):
        return node.value if not isinstance(node.value, bool) else None
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def pieces(value: ast.expr) -> list[Origin]:
    """The origins of a credential's value (see the module). A constant is one only where a
    transform, a condition or a fallback stands between it and the credential: one bound
    to the credential directly is judged where it stands."""
    found: list[Origin] = []
    stack: list[tuple[ast.expr, bool]] = [(value, False)]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, ast.FormattedValue):
            stack.append((node.value, inside))
        elif isinstance(node, ast.JoinedStr | ast.Tuple | ast.List):
            # their constants are labels and separators, unless bound to the credential
            elements = node.values if isinstance(node, ast.JoinedStr) else node.elts
            stack.extend((element, False) for element in elements)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            stack.extend(((node.left, inside), (node.right, inside)))
        elif isinstance(node, ast.IfExp):
            stack.extend(((node.body, True), (node.orelse, True)))
        elif isinstance(node, ast.BoolOp):
            stack.extend((operand, True) for operand in node.values)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            stack.append((node.value, True))
        elif isinstance(node, ast.Call) and (sources := _transformed(node)) is not None:
            stack.extend((source, True) for source in sources)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            if inside:
                found.append(Literal(node, ()))
        elif (origin := origin_of(node)) is not None:
            found.append(origin)
    return found


def _called(value: ast.expr) -> str | None:
    """``returns_of(f)`` for a call ``f()`` of a plain name without arguments."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return None if value.args or value.keywords else returns_of(value.func.id)
    return None


def returns_of(function: str) -> str:
    """The name standing for what a function defined in the snippet returns."""
    return f"{function}()"  # never an identifier: no name is mistaken for it


# Calls whose text is the text of what they are given: functions of their first argument
# (``str(x)``, ``base64.b64encode(x)``) and methods of their receiver (``x.strip()``).
_TEXT_FUNCTIONS = frozenset(
    {"str", "bytes", "bytearray", "reversed", "b64encode", "b64decode", "urlsafe_b64encode"}
    | {"urlsafe_b64decode", "b32encode", "b32decode", "b16encode", "b16decode", "hexlify"}
    | {"unhexlify", "fromhex", "quote", "quote_plus", "unquote", "unquote_plus", "dedent"}
)
_TEXT_METHODS = frozenset(
    {"strip", "lstrip", "rstrip", "lower", "upper", "casefold", "title", "capitalize"}
    | {"swapcase", "replace", "encode", "decode", "removeprefix", "removesuffix", "zfill"}
    | {"center", "ljust", "rjust", "translate", "expandtabs", "hex"}
)


def _transformed(call: ast.Call) -> list[ast.expr] | None:
    """The text a transform is applied to, else ``None``: a function's first argument
    (``str(x)``, ``base64.b64encode(x)``), a method's receiver (``x.strip()``), the parts
    of ``sep.join(parts)`` and the values of ``template.format(x)``; never a method's
    options (``encode("utf-8")``) or a separator."""
    func, args = call.func, [a for a in call.args if not isinstance(a, ast.Starred)]
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name in _TEXT_FUNCTIONS:
        return args[:1]
    if not isinstance(func, ast.Attribute):
        return None
    if name in ("join", "format"):
        return [*args, *(keyword.value for keyword in call.keywords)]
    return [func.value] if name in _TEXT_METHODS else None
