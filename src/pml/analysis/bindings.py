"""The names code binds its values to: what a constant is, judged by the name it is given.

``binding_contexts(node)`` maps the ids of ``node``'s value children (grandchildren for a
tuple unpacked into names) to the name each is bound to: a keyword argument, a dict key, an
assignment's target (a name, an attribute, a string subscript, a tuple of them), a
parameter's default, the name a value is compared with, and the password of a command
written as an argument list (``["sshpass", "-p", "..."]``, ``["--api-key", "..."]``: the
list read as a command line). Secret lifting and checking read a constant under a
credential name (``password = "..."``) as a credential.

A constant given to a plain name first and used as a credential later (``x = "..."`` then
``password = x``, ``api_key=x``, ``f"Bearer {x}"`` under an ``Authorization`` key) is
bound to that credential: ``mark_credential_aliases(tree)`` marks such names, through
chains of names (``b = a``) too, and ``binding_contexts`` then names the constant by the
credential it becomes.

Example::

    >>> import ast
    >>> tree = ast.parse('user, password = "bob", "pw"')
    >>> sorted(binding_contexts(tree.body[0]).values())
    ['password', 'user']
"""

from __future__ import annotations

import ast

from pml.analysis.credentials import flag_spans, is_secret_keyword
from pml.analysis.secret_text import holds_secret
from pml.analysis.token_shapes import command_line_spans

# What a name lifted from an argument list is called (``["sshpass", "-p", "..."]``).
ARGV_SECRET = "password"
# The attribute a name (``ast.Name``) carries when its value becomes a credential.
CREDENTIAL_ALIAS = "pml_credential"


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
        return {id(default): _arg_name(arg) for arg, default in pairs if default is not None}
    if isinstance(node, ast.List | ast.Tuple) and len(node.elts) >= 2:
        return _argv_contexts(node.elts)
    if isinstance(node, ast.Compare) and len(node.comparators) == 1:
        left, right = node.left, node.comparators[0]
        return {id(right): name} if (name := _target_name(left)) else _bound(right, left)
    return {}


def _arg_name(node: ast.arg) -> str:
    alias = getattr(node, CREDENTIAL_ALIAS, None)
    return alias if isinstance(alias, str) else node.arg


def _target_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        alias = getattr(node, CREDENTIAL_ALIAS, None)
        return alias if isinstance(alias, str) else node.id
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


def mark_credential_aliases(tree: ast.AST) -> None:
    """Mark every name bound (``x = ...``, ``for x in``, ...) whose value reaches a
    credential, with the credential's name (see module)."""
    nodes = list(ast.walk(tree))
    aliases: dict[str, str] = {}
    copies: list[tuple[str, str]] = []  # (target, source) of each ``target = source``
    for node in nodes:
        contexts = binding_contexts(node)
        if not contexts:
            continue
        children = {id(child): child for child in ast.iter_child_nodes(node)}
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
            children.update((id(element), element) for element in node.value.elts)
        for child_id, name in contexts.items():
            value = children.get(child_id)
            if not isinstance(value, ast.expr):
                continue
            if isinstance(value, ast.Name) and not is_secret_keyword(name):
                copies.append((name, value.id))
            elif is_secret_keyword(name):
                for piece in _pieces(value):
                    aliases.setdefault(piece, name)
    sources: dict[str, list[str]] = {}  # target -> the names copied into it
    for target, source in copies:
        sources.setdefault(target, []).append(source)
    reached = list(aliases)
    while reached:  # each name once: linear in the copies
        target = reached.pop()
        for source in sources.pop(target, ()):
            if source not in aliases:
                aliases[source] = aliases[target]
                reached.append(source)
    if not aliases:
        return
    values = _bound_values(nodes)
    for node in nodes:
        name = _bound_name(node)
        if name is None or name not in aliases or is_secret_keyword(name):
            continue  # a credential name already says what it holds
        value = values.get(id(node))
        if value is not None and _lifted_as_is(name, value):
            continue  # its own name already lifts it: the parameter keeps that name
        setattr(node, CREDENTIAL_ALIAS, aliases[name])


def _bound_values(nodes: list[ast.AST]) -> dict[int, ast.expr]:
    """The value each plain name or parameter is given, by the id of the name's node."""
    values: dict[int, ast.expr] = {}
    for node in nodes:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            values.update((id(t), node.value) for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            with_defaults = positional[len(positional) - len(node.defaults) :]
            values.update((id(a), d) for a, d in zip(with_defaults, node.defaults, strict=True))
            values.update(
                (id(a), d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d
            )
    return values


def _lifted_as_is(name: str, value: ast.expr) -> bool:
    """Whether a string in ``value`` is a secret under ``name`` alone."""
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and holds_secret(name, node.value)
        for node in ast.walk(value)
    )


def _bound_name(node: ast.AST) -> str | None:
    """The name ``node`` binds a value to: a stored name, or a parameter."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return node.id
    return node.arg if isinstance(node, ast.arg) else None


def _pieces(value: ast.expr) -> list[str]:
    """The names whose text a credential's value is made of: the value itself, the parts
    of an f-string or of a ``+``, the elements of a tuple or list."""
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.FormattedValue):
            stack.append(node.value)
        elif isinstance(node, ast.JoinedStr | ast.Tuple | ast.List):
            stack.extend(node.values if isinstance(node, ast.JoinedStr) else node.elts)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            stack.extend((node.left, node.right))
    return found
