"""Naming the parameters that secrets become, and the expressions that read them back.

A secret found outside a tool call's keyword argument (in f-string text, bytes, a dict key,
a concatenation of constants) becomes a required string parameter named after what it is
bound to (``token = ...`` → ``token``; nothing → ``secret``), with ``_2``, ``_3``... when the
name is taken. The same secret text met twice is the same parameter. A bytes secret is read
back as ``args["name"].encode()`` (UTF-8), so its parameter holds text.

Example::

    >>> names = SecretNames({"token"}, {})
    >>> names.name_for("token", "ghp_x"), names.name_for("", "ghp_x"), names.name_for("", "y")
    ('token_2', 'token_2', 'secret')
    >>> [p.name for p in names.parameters]
    ['token_2', 'secret']
"""

from __future__ import annotations

import ast
import json

from pml.analysis.credentials import secret_base
from pml.analysis.lifting import Parameter

ARGS = "args"
MCP = "mcp"


class SecretNames:
    """Parameter names already used, and the parameters added for secrets."""

    def __init__(self, taken: set[str], known: dict[str, str]) -> None:
        self._taken = set(taken)
        self._known = dict(known)  # secret text -> parameter name
        self.parameters: list[Parameter] = []

    def name_for(self, context: str, value: str) -> str:
        """The parameter holding ``value`` (created, required, on first use)."""
        name = self._known.get(value)
        if name is not None:
            return name
        base = secret_base(context)
        name, suffix = base, 1
        while name in self._taken:
            suffix += 1
            name = f"{base}_{suffix}"
        self._taken.add(name)
        self._known[value] = name
        self.parameters.append(Parameter(name, {"type": "string"}, True, "secret"))
        return name


def args_item(name: str) -> ast.Subscript:
    """``args["name"]`` as an expression node."""
    key = ast.Constant(name)
    return ast.Subscript(ast.Name(ARGS, ast.Load()), key, ast.Load())


def encoded(node: ast.expr) -> ast.Call:
    """``<node>.encode()``: a text parameter standing for a bytes secret."""
    return ast.Call(ast.Attribute(node, "encode", ast.Load()), [], [])


def args_text(name: str) -> str:
    """``args["name"]`` as source text."""
    return f"{ARGS}[{json.dumps(name, ensure_ascii=False)}]"


def _is_name(node: ast.AST, *names: str) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def key_nodes(node: ast.AST) -> list[ast.expr]:
    """The children of ``node`` that name something the code is checked against — the key of
    ``args["k"]`` and ``args.get("k", ...)``, the tool of ``mcp["fqdn"]`` and
    ``mcp.ns["tool"]`` — and so are never replaced by a parameter."""
    if isinstance(node, ast.Subscript):
        owner = node.value
        if isinstance(owner, ast.Attribute):
            return [node.slice] if _is_name(owner.value, MCP) else []
        return [node.slice] if _is_name(owner, ARGS, MCP) else []
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr == "get" and _is_name(func.value, ARGS):
        return [node.args[0]] if isinstance(node, ast.Call) and node.args else []
    return []
