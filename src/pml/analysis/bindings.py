"""The names code binds its values to: what a constant is, judged by the name it is given.

``binding_contexts(node)`` maps the ids of ``node``'s value children (grandchildren for a
tuple unpacked into names) to the name each is bound to: a keyword argument, a dict key, an
assignment's target (a name, an attribute, a string subscript, a tuple of them), a
parameter's default, the name a value is compared with, and the password of a command
written as an argument list (``["sshpass", "-p", "..."]``, ``["--api-key", "..."]``: the
list read as a command line). Secret lifting and checking read a constant under a
credential name (``password = "..."``) as a credential.

Example::

    >>> import ast
    >>> tree = ast.parse('user, password = "bob", "pw"')
    >>> sorted(binding_contexts(tree.body[0]).values())
    ['password', 'user']
"""

from __future__ import annotations

import ast

from pml.analysis.credentials import flag_spans
from pml.analysis.token_shapes import command_line_spans

# What a name lifted from an argument list is called (``["sshpass", "-p", "..."]``).
ARGV_SECRET = "password"


def literal_str(node: ast.expr) -> str | None:
    """The text of a string constant, else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def binding_contexts(node: ast.AST) -> dict[int, str]:
    """The names ``node`` binds its value children to: keyword, dict key, assignment target
    (a name, an attribute, a string subscript, a tuple of them), parameter default, and the
    name a value is compared with (``password == "..."``)."""
    if isinstance(node, ast.keyword) and node.arg is not None:
        return {id(node.value): node.arg}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) == 1 and node.value is not None:
            return _bound(targets[0], node.value)
    if isinstance(node, ast.Dict):
        return {
            id(value): name
            for key, value in zip(node.keys, node.values, strict=True)
            if key is not None and (name := literal_str(key)) is not None
        }
    if isinstance(node, ast.arguments):
        positional = [*node.posonlyargs, *node.args]
        with_defaults = positional[len(positional) - len(node.defaults) :]
        pairs = [
            *zip(with_defaults, node.defaults, strict=True),
            *zip(node.kwonlyargs, node.kw_defaults, strict=True),
        ]
        return {id(default): arg.arg for arg, default in pairs if default is not None}
    if isinstance(node, ast.List | ast.Tuple) and len(node.elts) >= 2:
        return _argv_contexts(node.elts)
    if isinstance(node, ast.Compare) and len(node.comparators) == 1:
        left, right = node.left, node.comparators[0]
        return {id(right): name} if (name := _target_name(left)) else _bound(right, left)
    return {}


def _target_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return literal_str(node.slice)
    return None


def _bound(target: ast.expr, value: ast.expr) -> dict[int, str]:
    if (name := _target_name(target)) is not None:
        return {id(value): name}
    if not isinstance(target, ast.Tuple | ast.List) or not isinstance(value, ast.Tuple | ast.List):
        return {}
    if len(target.elts) != len(value.elts):
        return {}
    found = [(id(v), _target_name(t)) for t, v in zip(target.elts, value.elts, strict=True)]
    return {key: name for key, name in found if name is not None}


def _argv_contexts(elements: list[ast.expr]) -> dict[int, str]:
    """The elements of an argument list that hold a command line's password (see module)."""
    texts = [literal_str(element) for element in elements]
    if not any(text is not None and text.startswith("-") for text in texts):
        return {}
    # Anything but a string constant reads as a variable (the finders skip ``$...``).
    words = ["$" if text is None else text for text in texts]
    starts: list[int] = []
    offset = 0
    for word in words:
        starts.append(offset)
        offset += len(word) + 1
    line = " ".join(words)
    found: dict[int, str] = {}
    for start, _ in [*command_line_spans(line), *flag_spans(line)]:
        index = max(i for i, at in enumerate(starts) if at <= start)
        if texts[index] is not None:
            found[id(elements[index])] = ARGV_SECRET
    return found
