"""Credentials given by position: to what the snippet defines, and paired by ``zip``.

``credential_flow`` follows a credential back from the name it is bound to. A keyword says
that name in place (``connect(password="...")``); a value passed by position says it only
where the callee is defined:

- a function or lambda of the snippet: ``def connect(host, password): ...`` then
  ``connect("db", "...")``; its methods, called on anything (``client.auth("ada", "...")``;
  ``self`` and ``cls`` skipped);
- a class of the snippet: its ``__init__``'s parameters, else its annotated fields in order
  (a dataclass, a ``typing.NamedTuple``): ``Creds("ada", "...")``;
- a ``namedtuple("Creds", "user password")`` (fields as one string or a list, or the
  ``(name, type)`` pairs of ``typing.NamedTuple("Creds", [...])``);
- ``f(*pair)``: the elements of ``pair`` from where it is spread (by position when ``pair``
  is written in place, else any of them may be the first credential from there); a call that
  signs in (``smtp.login(*pair)``) takes the password last, as when given in place;
- ``b64encode(f"{user}:{pw}".encode())``: the password of an HTTP Basic credential
  (``basic_credentials``);
- ``zip(names, values)`` (``dict(zip(...))``, ``for k, v in zip(...)``): the value at the
  index of a credential's name, when the names are written as a list or tuple of strings
  (in place or given to a plain name).

``positional_sources(nodes)`` returns each such argument as an ``Origin`` to follow, with
the credential's name. A name defined twice counts with every definition (a credential by
position in any of them is one): lifting a value that was not a credential costs a
parameter, storing one that was costs the secret.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from pml.analysis.basic_credentials import BASIC_PASSWORD, basic_password
from pml.analysis.bindings import literal_str
from pml.analysis.credential_sources import Literal, Origin, extend, origin_of
from pml.analysis.credentials import is_secret_keyword
from pml.analysis.secret_pairs import SIGN_IN_PASSWORD, signs_in

_NAMEDTUPLES = frozenset({"namedtuple", "NamedTuple"})


@dataclass(frozen=True)
class Positions:
    """A callable's credential parameters: their names by position, and the positions in
    order."""

    names: dict[int, str]
    order: list[int]

    def first_from(self, index: int) -> str | None:
        """The first credential parameter at ``index`` or after it."""
        at = bisect.bisect_left(self.order, index)
        return self.names[self.order[at]] if at < len(self.order) else None


def positional_sources(nodes: list[ast.AST]) -> list[tuple[Origin, str]]:
    """The arguments given by position to a credential's parameter, and that credential.
    The work is linear in the code's size: past a budget proportional to it, a ``zip``
    counts every value as the credential (more lifted, never a secret stored)."""
    functions, methods = _signatures(nodes)
    credential_names = _credential_lists(nodes)
    budget = 8 * len(nodes) + 64
    found: list[tuple[Origin, str]] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        if _is_zip(node):
            paired = _zipped(node, credential_names)
            values = node.args[1]
            if len(paired) > budget:
                paired = [(_element(values, None), paired[0][1])] if paired else []
            budget -= len(paired)
            found.extend(paired)
            continue
        if (password := basic_password(node)) is not None:
            found.append((Literal(password, ()), BASIC_PASSWORD))
            continue  # ``b64encode(f"{user}:{pw}".encode())``
        if signs_in(node) and node.args and isinstance(node.args[-1], ast.Starred):
            found.append((_element(node.args[-1].value, -1), SIGN_IN_PASSWORD))
            continue  # ``smtp.login(*pair)``: the password last, as given in place
        func = node.func
        if isinstance(func, ast.Name):
            positions = functions.get(func.id)
        elif isinstance(func, ast.Attribute):
            positions = methods.get(func.attr)
        else:
            continue
        if positions:  # at most one source per argument: linear
            found.extend(_bound_by_position(node.args, positions))
    return found


def _signatures(nodes: list[ast.AST]) -> tuple[dict[str, Positions], dict[str, Positions]]:
    """The credential parameters of the snippet's callables: by plain name, and methods by
    attribute name. A name defined more than once has those of every definition."""
    functions: dict[str, dict[int, str]] = {}
    methods: dict[str, dict[int, str]] = {}
    in_classes: set[int] = set()

    def add(into: dict[str, dict[int, str]], name: str, parameters: list[str]) -> None:
        for index, parameter in enumerate(parameters):
            if is_secret_keyword(parameter):
                into.setdefault(name, {}).setdefault(index, parameter)

    for node in nodes:
        if isinstance(node, ast.ClassDef):
            own = [child for child in node.body if isinstance(child, ast.FunctionDef)]
            in_classes.update(id(method) for method in own)
            for method in own:
                add(methods, method.name, _parameters(method.args, method=_bound(method)))
            init = next((method for method in own if method.name == "__init__"), None)
            fields = [
                child.target.id
                for child in node.body
                if isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name)
            ]
            add(functions, node.name, _parameters(init.args, method=True) if init else fields)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if not isinstance(target, ast.Name):
                continue
            if isinstance(value, ast.Lambda):
                add(functions, target.id, _parameters(value.args, method=False))
            elif isinstance(value, ast.Call) and (fields := namedtuple_fields(value)) is not None:
                add(functions, target.id, fields)
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in in_classes:
            add(functions, node.name, _parameters(node.args, method=False))
    return _sorted(functions), _sorted(methods)


def _sorted(by_name: dict[str, dict[int, str]]) -> dict[str, Positions]:
    return {name: Positions(names, sorted(names)) for name, names in by_name.items()}


def _bound(method: ast.FunctionDef) -> bool:
    """Whether a method's first parameter is its instance or class (not a staticmethod)."""
    return not any(
        isinstance(decorator, ast.Name) and decorator.id == "staticmethod"
        for decorator in method.decorator_list
    )


def _parameters(arguments: ast.arguments, *, method: bool) -> list[str]:
    names = [argument.arg for argument in [*arguments.posonlyargs, *arguments.args]]
    return names[1:] if method else names


def namedtuple_fields(call: ast.Call) -> list[str] | None:
    """The fields of ``namedtuple("T", "a b")`` / ``NamedTuple("T", [("a", str)])``."""
    if len(call.args) < 2:
        return None
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name not in _NAMEDTUPLES:
        return None
    spec = call.args[1]
    if (text := literal_str(spec)) is not None:
        return text.replace(",", " ").split()
    if not isinstance(spec, ast.List | ast.Tuple):
        return None
    fields: list[str] = []
    for element in spec.elts:
        if isinstance(element, ast.Tuple | ast.List) and element.elts:
            element = element.elts[0]
        fields.append(literal_str(element) or "")
    return fields


def _bound_by_position(
    arguments: list[ast.expr], positions: Positions
) -> Iterator[tuple[Origin, str]]:
    """``(argument, parameter)`` for each credential parameter a positional argument fills.
    A spread of a list or tuple written in place counts as its elements. From a spread of
    anything else on, positions are unknown: any of its elements, and every later argument,
    may fill the first credential parameter from there."""
    flat = list(_spread_in_place(arguments))
    for index, argument in enumerate(flat):
        if isinstance(argument, ast.Starred):
            later = positions.first_from(index)
            if later is None:
                return
            yield _element(argument.value, None), later  # any of its elements
            for rest in flat[index + 1 :]:
                yield Literal(_unstarred(rest), ()), later
            return
        if (name := positions.names.get(index)) is not None:
            yield Literal(argument, ()), name


def _spread_in_place(arguments: list[ast.expr]) -> Iterator[ast.expr]:
    """The arguments, with ``*[a, b]`` and ``*(a, b)`` read as ``a, b``."""
    for argument in arguments:
        value = argument.value if isinstance(argument, ast.Starred) else None
        if isinstance(value, ast.List | ast.Tuple):
            yield from _spread_in_place(value.elts)
        else:
            yield argument


def _unstarred(argument: ast.expr) -> ast.expr:
    return argument.value if isinstance(argument, ast.Starred) else argument


def _element(container: ast.expr, index: int | None) -> Origin:
    """``container[index]`` (``None``: any element): written in place, or a name's."""
    origin = origin_of(container)
    return extend(origin, (index,)) if origin is not None else Literal(container, (index,))


def _is_zip(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "zip"
        and len(node.args) == 2
        and not any(isinstance(argument, ast.Starred) for argument in node.args)
    )


def _credential_lists(nodes: list[ast.AST]) -> dict[str, dict[int, str]]:
    """Plain names given a list or tuple of strings: the index of each credential's name
    in it (of every list, for a name given more than once)."""
    given: dict[str, dict[int, str]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple):
            paired = _credentials_in(node.value)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    given.setdefault(target.id, {}).update(
                        (index, name)
                        for index, name in paired.items()
                        if index not in given[target.id]
                    )
    return given


def _credentials_in(names: ast.List | ast.Tuple) -> dict[int, str]:
    return {
        index: name
        for index, element in enumerate(names.elts)
        if (name := literal_str(element)) is not None and is_secret_keyword(name)
    }


def _zipped(
    call: ast.Call, credential_names: dict[str, dict[int, str]]
) -> list[tuple[Origin, str]]:
    """``zip(names, values)``: the value paired with each credential's name."""
    names, values = call.args
    if isinstance(names, ast.Name):
        paired = credential_names.get(names.id, {})
    elif isinstance(names, ast.List | ast.Tuple):
        paired = _credentials_in(names)
    else:
        return []
    return [(_element(values, index), name) for index, name in sorted(paired.items())]


__all__ = ["namedtuple_fields", "positional_sources"]
