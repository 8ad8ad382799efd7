"""Following a credential back to the constant it was written as.

A constant given to a plain name first and used as a credential later is lifted like one
written in place. ``mark_credential_aliases(tree)`` finds them:

- through names: ``x = "..."`` then ``password = x``, ``api_key=x``, ``f"Bearer {x}"``
  under an ``Authorization`` key, chains of names (``b = a``) and parameter defaults;
- through containers: ``vals = ["ada", "..."]`` then ``user, password = vals``;
  ``creds = {"p": "..."}`` then ``password=creds["p"]`` (or ``creds.get("p")``);
  ``keys[0]``, ``d["p"] = "..."``, ``keys.append("...")``, nested containers;
- through loops: ``for pw in ["..."]: login(password=pw)``, comprehensions too;
- by position, to a parameter of what the snippet defines (``def connect(host, password)``
  then ``connect("db", "...")``, a class's fields, a ``namedtuple``) or beside a
  credential's name in ``zip(names, values)`` (``credential_calls``).

A name whose value becomes a credential gets the credential's name (``CREDENTIAL_ALIAS``
on its ``ast.Name`` or ``ast.arg``); a constant inside a container gets it on its
``ast.Constant``. ``binding_contexts`` then names the constant by that credential. Where the
way in cannot be told (``vals[i]``, ``for pw in vals``), every element may be the credential.

The search visits each (name, path into its value) once, within a budget proportional to
the code, so hostile code cannot make it slow.

Example::

    >>> import ast
    >>> tree = ast.parse('vals = ["ada", "s3cr3t"]\\nuser, password = vals')
    >>> mark_credential_aliases(tree)
    >>> [getattr(n, CREDENTIAL_ALIAS, None) for n in tree.body[0].value.elts]
    [None, 'password']
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field

from pml.analysis.basic_credentials import basic_password
from pml.analysis.bindings import CREDENTIAL_ALIAS, MARKED_CHILDREN, binding_contexts
from pml.analysis.credential_calls import namedtuple_fields, positional_sources
from pml.analysis.credential_sources import (
    MAX_PATH,
    Key,
    Literal,
    Origin,
    Path,
    extend,
    key_of,
    origin_of,
    pieces,
    returns_of,
)
from pml.analysis.credentials import is_secret_keyword
from pml.analysis.secret_pairs import signs_in
from pml.analysis.secret_text import holds_secret

_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict)
_KEY_CHARS = 200  # of a string read as a name (a dict key or subscript may name one)


@dataclass
class _Flow:
    origins: dict[str, list[Origin]] = field(default_factory=dict[str, list[Origin]])
    # The values a name's elements are given: whole containers (key path ``()``) and
    # single elements (``d["p"] = ...``: ``("p",)``; ``keys.append(...)``: ``(None,)``).
    stores: dict[str, list[tuple[Path, ast.expr]]] = field(
        default_factory=dict[str, list[tuple[Path, ast.expr]]]
    )
    seeds: list[tuple[ast.expr, str]] = field(default_factory=list[tuple[ast.expr, str]])
    # Arguments given by position to a credential's parameter (``credential_calls``).
    sources: list[tuple[Origin, str]] = field(default_factory=list[tuple[Origin, str]])

    def origin(self, name: str, origin: Origin) -> None:
        self.origins.setdefault(name, []).append(origin)

    def store(self, name: str, path: Path, value: ast.expr) -> None:
        self.stores.setdefault(name, []).append((path, value))


def mark_credential_aliases(tree: ast.AST) -> None:
    """Mark every name bound (``x = ...``, ``for x in``, ...) and every constant in a
    container whose value reaches a credential, with the credential's name (see module)."""
    nodes = list(ast.walk(tree))
    if not _names_a_credential(nodes):
        return  # nothing can become a credential: no flow to follow
    flow = _read_flow(nodes)
    marked: dict[int, str] = {}
    aliases = _follow(flow, marked, budget=8 * len(nodes) + 64)
    if marked:
        _mark_parents(nodes, marked)
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


def _names_a_credential(nodes: list[ast.AST]) -> bool:
    """Whether any name, keyword, attribute or short string here names a credential: a
    flow starts only at one."""
    words: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.arg | ast.keyword):
            words.add(node.arg or "")
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words.add(node.value[:_KEY_CHARS])
        elif isinstance(node, ast.Call) and (fields := namedtuple_fields(node)) is not None:
            words.update(fields)  # ``namedtuple("C", "password user")``
        elif isinstance(node, ast.Call) and (signs_in(node) or basic_password(node)):
            return True  # ``login(*pair)``, ``b64encode(b"ada:…")``: a password in them
    return any(is_secret_keyword(word) for word in words)


def _mark_parents(nodes: list[ast.AST], marked: dict[int, str]) -> None:
    """Tell each marked constant's parent, where ``binding_contexts`` reads it."""
    for node in nodes:
        children = {id(child) for child in ast.iter_child_nodes(node)}
        mine = {child: marked[child] for child in children & marked.keys()}
        if mine:
            setattr(node, MARKED_CHILDREN, mine)


def _read_flow(nodes: list[ast.AST]) -> _Flow:
    flow = _Flow()
    for node in nodes:
        contexts = binding_contexts(node)
        if contexts:
            children = {id(child): child for child in ast.iter_child_nodes(node)}
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
                children.update((id(element), element) for element in node.value.elts)
            for child_id, name in contexts.items():
                value = children.get(child_id)
                if not isinstance(value, ast.expr):
                    continue
                if is_secret_keyword(name):
                    flow.seeds.append((value, name))
                elif (origin := origin_of(value)) is not None:
                    flow.origin(name, origin)
                elif not isinstance(value, ast.Constant):  # a constant: its name is marked
                    flow.origin(name, Literal(value, ()))  # ``h = b64encode(...).decode()``
        _read_statement(node, flow)
    flow.sources = positional_sources(nodes)
    return flow


def _read_statement(node: ast.AST, flow: _Flow) -> None:
    """Unpacking, loops and stores into containers (what ``binding_contexts`` leaves)."""
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            _read_target(target, node.value, (), flow)
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        _read_target(node.target, node.iter, (None,), flow)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        for inner in ast.walk(node):
            if isinstance(inner, ast.Return) and inner.value is not None:
                flow.origin(returns_of(node.name), Literal(inner.value, ()))
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.attr in ("append", "add", "insert")
        and node.args
    ):
        flow.store(node.func.value.id, (None,), node.args[-1])


def _read_target(target: ast.expr, value: ast.expr, path: Path, flow: _Flow) -> None:
    """``target = value[path]``: a name, an element store, or an unpacking."""
    if isinstance(target, ast.Name):
        if isinstance(value, ast.Lambda) and not path:
            flow.origin(returns_of(target.id), Literal(value.body, ()))
        elif isinstance(value, _CONTAINERS):
            if path:
                flow.origin(target.id, Literal(value, path))
            else:
                flow.store(target.id, (), value)
        elif path and (origin := origin_of(value)) is not None:
            flow.origin(target.id, extend(origin, path))
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and not path:
        flow.store(target.value.id, (key_of(target.slice),), value)
    elif isinstance(target, ast.Tuple | ast.List) and len(path) < MAX_PATH:
        if not path and isinstance(value, ast.Tuple | ast.List):
            return  # ``a, b = x, y``: ``binding_contexts`` pairs them
        starred = any(isinstance(element, ast.Starred) for element in target.elts)
        for index, element in enumerate(target.elts):
            after_star = starred and any(isinstance(e, ast.Starred) for e in target.elts[:index])
            key: Key = index - len(target.elts) if after_star else index
            if isinstance(element, ast.Starred):
                element, key = element.value, None
            _read_target(element, value, (*path, key), flow)


def _follow(flow: _Flow, marked: dict[int, str], budget: int) -> dict[str, str]:
    """Walk back from every credential to the names and constants it comes from: the names
    are returned, the constants' ids put in ``marked``."""
    aliases: dict[str, str] = {}
    seen: set[tuple[str, Path]] = set()
    queue: deque[tuple[Origin, str]] = deque()
    for value, name in flow.seeds:
        for piece in pieces(value):
            queue.append((piece, name))
    for name in flow.origins:
        if is_secret_keyword(name):
            queue.append((name, name))
    later = [flow.sources]  # a credential named where it is bound keeps that name
    while budget > 0 and (queue or later):
        if not queue:
            queue.extend(later.pop())
            continue
        budget -= 1
        origin, credential = queue.popleft()
        if isinstance(origin, Literal):
            _resolve(origin.node, origin.path, credential, queue, marked)
            continue
        name, path = (origin, ()) if isinstance(origin, str) else (origin.name, origin.path)
        if (name, path) in seen:
            continue
        seen.add((name, path))
        if not path:
            aliases.setdefault(name, credential)
        for source in flow.origins.get(name, ()):
            queue.append((extend(source, path) if path else source, credential))
        for stored_path, value in flow.stores.get(name, ()):
            rest = _after(stored_path, path)
            if rest is not None:
                _resolve(value, rest, credential, queue, marked)
    return aliases


def _after(stored: Path, wanted: Path) -> Path | None:
    """What is left of ``wanted`` inside a value stored at ``stored``, else ``None``."""
    if len(stored) > len(wanted):
        return None
    for have, want in zip(stored, wanted, strict=False):
        if have is not None and want is not None and have != want:
            return None
    return wanted[len(stored) :]


def _resolve(
    value: ast.expr,
    path: Path,
    credential: str,
    queue: deque[tuple[Origin, str]],
    marked: dict[int, str],
) -> None:
    """The elements of ``value`` at ``path`` are the credential: mark its constants and
    follow its names. A container reached whole is the credential whole."""
    stack = [(value, path)]
    while stack:
        node, rest = stack.pop()
        if isinstance(node, ast.Starred):
            node = node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and not rest:
            setattr(node, CREDENTIAL_ALIAS, credential)
            marked.setdefault(id(node), credential)
        elif isinstance(node, ast.Dict) and rest:
            for key_node, element in zip(node.keys, node.values, strict=True):
                if key_node is None:  # ``**spread``: the key applies inside it
                    stack.append((element, rest))
                elif _matches(key_node, rest[0]):
                    stack.append((element, rest[1:]))
        elif isinstance(node, _CONTAINERS):
            key, after = (rest[0], rest[1:]) if rest else (None, ())
            stack.extend((element, after) for element in _chosen(node, key))
        elif (origin := origin_of(node)) is not None:
            queue.append((extend(origin, rest) if rest else origin, credential))
        elif not rest:
            queue.extend((piece, credential) for piece in pieces(node))


def _chosen(container: ast.expr, key: Key) -> list[ast.expr]:
    """The elements of a container literal that ``container[key]`` may be (a dict taken
    whole: all its values)."""
    if isinstance(container, ast.Dict):
        return container.values
    elements: list[ast.expr] = getattr(container, "elts", [])
    if isinstance(key, int) and not any(isinstance(e, ast.Starred) for e in elements):
        return [elements[key]] if -len(elements) <= key < len(elements) else []
    return elements


def _matches(key_node: ast.expr, key: Key) -> bool:
    if key is None:
        return True  # any element
    return not isinstance(key_node, ast.Constant) or key_node.value == key


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


__all__ = ["mark_credential_aliases"]
