"""The password inside an HTTP Basic credential being encoded: ``b64encode(b"user:pass")``.

Base64 of ``user:password`` is what an ``Authorization: Basic`` header carries, and code that
builds one names neither part: ``base64.b64encode(f"{user}:{pw}".encode())``, returned or
kept under any name. ``basic_password(call)`` is the part written after the colon, for a
Base64 encoding (``b64encode``, ``standard_b64encode``, ``urlsafe_b64encode``,
``encodebytes``) of text built as ``user:password``:

- an f-string ``f"{u}:{p}"``, a ``%`` template ``"%s:%s" % (u, p)``, ``"{}:{}".format(u, p)``,
  a sum ``u + ":" + p``, ``":".join([u, p])``: the expression after the colon, followed like
  any credential (a name, a constant, a transform);
- one constant ``"ada:…"`` (text or bytes): the whole constant,
  when before its only colon stands a user name and after it what looks like a credential,
  not a word or a path (``b64encode(b"key:value")`` and ``b"https://host/x"`` stay).

``.encode(...)`` and ``bytes(x, ...)`` around the text are read through.

Example::

    >>> import ast
    >>> call = ast.parse('b64encode(f"{user}:{pw}".encode())', mode="eval").body
    >>> ast.unparse(basic_password(call))
    'pw'
"""

from __future__ import annotations

import ast
from typing import Final

from pml.analysis.bindings import literal_str
from pml.analysis.secret_pairs import SIGN_IN_PASSWORD, credential_like

_ENCODERS: Final = frozenset(
    {"b64encode", "standard_b64encode", "urlsafe_b64encode", "encodebytes"}
)
BASIC_PASSWORD: Final = SIGN_IN_PASSWORD


def basic_password(call: ast.Call) -> ast.expr | None:
    """What a Base64 encoding of ``user:password`` holds after the colon (see module)."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name not in _ENCODERS or len(call.args) != 1:
        return None
    text = _unwrapped(call.args[0])
    if isinstance(text, ast.Constant):
        return text if _user_and_password(text.value) else None
    if isinstance(text, ast.JoinedStr):
        return _after_colon(text.values)
    if isinstance(text, ast.BinOp) and isinstance(text.op, ast.Mod):
        return _formatted(text.left, text.right)
    if isinstance(text, ast.BinOp) and isinstance(text.op, ast.Add):
        return _after_colon(_summands(text))
    if isinstance(text, ast.Call) and isinstance(text.func, ast.Attribute):
        return _method(text)
    return None


def _unwrapped(node: ast.expr) -> ast.expr:
    """``x.encode(...)`` and ``bytes(x, ...)`` read as ``x``."""
    while isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "encode" and len(node.args) <= 1:
            node = func.value
        elif isinstance(func, ast.Name) and func.id == "bytes" and node.args:
            node = node.args[0]
        else:
            break
    return node


def _user_and_password(value: object) -> bool:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or value.count(":") != 1:
        return False
    user, password = value.split(":")
    if not user or any(char.isspace() or char == "/" for char in user):
        return False
    return not password.startswith("/") and credential_like(BASIC_PASSWORD, password)


def _after_colon(parts: list[ast.expr]) -> ast.expr | None:
    """The part after a constant piece that ends with the colon, the first part being the
    user (a constant ``"ada:"`` or an expression)."""
    for index, part in enumerate(parts[:-1]):
        text = literal_str(part)
        if text is not None and text.endswith(":") and text.count(":") == 1:
            following = parts[index + 1]
            return following.value if isinstance(following, ast.FormattedValue) else following
    return None


def _summands(node: ast.BinOp) -> list[ast.expr]:
    parts: list[ast.expr] = []
    stack: list[ast.expr] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.BinOp) and isinstance(current.op, ast.Add):
            stack.extend((current.right, current.left))
        else:
            parts.append(current)
    return parts


def _formatted(template: ast.expr, values: ast.expr) -> ast.expr | None:
    """``"%s:%s" % (u, p)``: ``p``."""
    text = literal_str(template)
    if text is None or text.count(":") != 1 or not isinstance(values, ast.Tuple):
        return None
    before, after = text.split(":")
    fields_before = before.count("%s")
    if after.count("%s") != 1 or len(values.elts) != fields_before + 1:
        return None
    return values.elts[-1]


def _method(call: ast.Call) -> ast.expr | None:
    """``"{}:{}".format(u, p)`` and ``":".join([u, p])``: ``p``."""
    assert isinstance(call.func, ast.Attribute)
    text = literal_str(call.func.value)
    if text is None:
        return None
    if call.func.attr == "format" and text.count(":") == 1 and len(call.args) == 2:
        before, after = text.split(":")
        return call.args[1] if before == "{}" and after == "{}" else None
    if call.func.attr == "join" and text == ":" and len(call.args) == 1:
        parts = call.args[0]
        if isinstance(parts, ast.List | ast.Tuple) and len(parts.elts) == 2:
            return parts.elts[1]
    return None


__all__ = ["BASIC_PASSWORD", "basic_password"]
