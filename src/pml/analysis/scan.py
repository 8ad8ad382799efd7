"""One walk over a snippet's AST: its ``mcp`` references, ``args`` uses and liftable literals.

The walk is iterative (a deep but valid tree cannot overflow the stack) and checks the rules
that keep tool use statically visible: ``mcp`` is never rebound, tool names are literals, and
tool calls take keyword arguments only. Violations raise ``InvalidInput`` naming the line.

Example::

    >>> from pml.analysis.code_hash import parse_snippet
    >>> code = 'x = await mcp.fs.read(path="/a")\\nreturn mcp["acme.web.x.y.ab12"], args["n"]'
    >>> found = scan_snippet(parse_snippet(code), code)
    >>> [(s.namespace, s.name, s.line, s.column, s.called) for s in found.references_sites()]
    [('fs', 'read', 1, 11, True), ('', 'acme.web.x.y.ab12', 2, 8, False)]
    >>> [(u.keyword, u.value) for u in found.literals], [u.key for u in found.args_uses]
    ([('path', '/a')], ['n'])
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from pml.analysis.bindings import binding_contexts, literal_str
from pml.analysis.code_hash import canonical_dump
from pml.analysis.credential_flow import mark_credential_aliases
from pml.analysis.folding import split_secret
from pml.analysis.literals import literal_value
from pml.analysis.secret_text import holds_secret
from pml.analysis.source_map import SourceMap
from pml.errors import InvalidInput

MCP = "mcp"
ARGS = "args"
_REBOUND = f"{MCP} cannot be reassigned or shadowed"
_BARE_MCP = f'{MCP} can only be used as {MCP}.<server>.<tool>(...) or {MCP}["<fqdn>"](...)'


@dataclass(frozen=True, slots=True)
class CallSite:
    """One ``mcp.<namespace>.<name>`` / ``mcp.<namespace>["name"]`` / ``mcp["fqdn"]``."""

    namespace: str
    name: str
    line: int
    column: int
    called: bool


@dataclass(frozen=True, slots=True)
class Place:
    """Where an expression stands: its character span and its f-string surroundings."""

    start: int
    end: int
    fstring: tuple[int, int] | None = None  # span of the outermost f-string around it
    inner: tuple[int, int] | None = None  # span of the innermost one (same quoting inside)
    editable: bool = True  # False inside ``f"{expr=}"`` or when positions cannot be trusted


@dataclass(frozen=True, slots=True)
class Reference:
    site: CallSite
    place: Place


@dataclass(frozen=True, slots=True)
class ArgsUse:
    """``args["key"]`` (``is_get`` False) or ``args.get("key"[, default])``."""

    key: str
    is_get: bool
    has_default: bool
    literal: bool  # the default is a JSON literal (``default`` holds it)
    default: Any
    line: int
    place: Place  # the whole ``args[...]`` / ``args.get(...)`` expression


@dataclass(frozen=True, slots=True)
class LiteralUse:
    """A literal to lift: an ``mcp`` call's keyword value, or a secret found elsewhere."""

    keyword: str  # the keyword, or for a secret elsewhere the name it is assigned to ("" if none)
    value: Any
    kwarg: bool
    line: int
    place: Place


@dataclass(slots=True)
class Scan:
    references: list[Reference] = field(default_factory=list[Reference])
    args_uses: list[ArgsUse] = field(default_factory=list[ArgsUse])
    literals: list[LiteralUse] = field(default_factory=list[LiteralUse])

    def references_sites(self) -> list[CallSite]:
        return [reference.site for reference in self.references]


@dataclass(frozen=True, slots=True)
class _Frame:
    node: ast.AST
    context: str = ""  # the name a value is bound to: keyword, dict key, assignment target
    fstring: tuple[int, int] | None = None
    inner: tuple[int, int] | None = None
    frozen: bool = False
    no_secrets: bool = False  # constants here are lifted otherwise, or cannot be replaced


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _reference(node: ast.AST) -> tuple[str, str, str] | None:
    """``(namespace, name, display)`` when ``node`` is a well-formed ``mcp`` reference."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        if _is_name(node.value.value, MCP):
            namespace = node.value.attr
            return namespace, node.attr, f"{MCP}.{namespace}.{node.attr}"
    elif isinstance(node, ast.Subscript):
        name = literal_str(node.slice)
        if name is None:
            return None
        if _is_name(node.value, MCP):
            return "", name, f"{MCP}[{json.dumps(name)}]"
        if isinstance(node.value, ast.Attribute) and _is_name(node.value.value, MCP):
            namespace = node.value.attr
            return namespace, name, f"{MCP}.{namespace}[{json.dumps(name)}]"
    return None


def _binds_mcp(node: ast.AST) -> bool:
    """Whether ``node`` (re)binds the name ``mcp``."""
    if isinstance(node, ast.Name):
        return node.id == MCP and not isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.arg):
        return node.arg == MCP
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == MCP
    if isinstance(node, ast.alias):
        return (node.asname or node.name.split(".")[0]) == MCP
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return node.name == MCP
    if isinstance(node, ast.MatchMapping):
        return node.rest == MCP
    return False


def _parses_to(text: str, node: ast.expr) -> bool:
    """Whether ``text`` is the source of ``node`` (guards against wrong AST positions)."""
    try:
        parsed = ast.parse(f"({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return canonical_dump(parsed) == canonical_dump(node)


class _Walker:
    def __init__(self, code: str) -> None:
        self.code = code
        self.source = SourceMap(code)
        self.scan = Scan()
        self.errors: list[tuple[int, int, str]] = []
        self.accounted: set[int] = set()  # ids of ``mcp`` / ``mcp.x`` nodes inside a reference
        self.handled: set[int] = set()  # ids of constants lifted, or read as names and keys
        self.called: set[int] = set()  # ids of references that are the callee of a call
        self.bound: dict[int, str] = {}  # ids of values → the names they are bound to
        self.stack: list[_Frame] = []

    def fail(self, node: ast.AST, message: str) -> None:
        line: int = getattr(node, "lineno", 1)
        self.errors.append((line, getattr(node, "col_offset", 0), f"{message} (line {line})"))

    def place(self, node: ast.expr, frame: _Frame) -> Place:
        start, end = self.source.span(node)
        if frame.frozen:
            return Place(start, end, frame.fstring, frame.inner, editable=False)
        # Positions inside f-strings are recomputed by the 3.11 parser: check them.
        trusted = frame.fstring is None or _parses_to(self.code[start:end], node)
        return Place(start, end, frame.fstring, frame.inner, trusted)

    def push(
        self,
        node: ast.AST,
        frame: _Frame,
        *,
        context: str = "",
        inner: tuple[int, int] | None = None,
        frozen: bool = False,
        no_secrets: bool = False,
    ) -> None:
        """Stack a child; the f-string, frozen and no-secret marks pass down to descendants."""
        inner = inner or frame.inner
        fstring = frame.fstring or inner
        frozen = frame.frozen or frozen
        no_secrets = frame.no_secrets or no_secrets
        self.stack.append(_Frame(node, context, fstring, inner, frozen, no_secrets))

    def run(self, tree: ast.Module) -> Scan:
        self.stack.append(_Frame(tree))
        while self.stack:  # pre-order: a node is visited before its children
            frame = self.stack.pop()
            self.visit(frame)
            self.push_children(frame)
        if self.errors:
            line, _, message = min(self.errors)
            raise InvalidInput(message, field="code", line=line)
        self.scan.references.sort(key=lambda reference: reference.place.start)
        return self.scan

    def visit(self, frame: _Frame) -> None:
        node = frame.node
        if _binds_mcp(node):
            self.fail(node, _REBOUND)
        elif isinstance(node, ast.Attribute | ast.Subscript):
            self.visit_reference(node, frame)
        elif _is_name(node, MCP) and id(node) not in self.accounted:
            self.fail(node, _BARE_MCP)
        elif isinstance(node, ast.Call):
            self.visit_call(node, frame)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.visit_string(node, frame)

    def visit_reference(self, node: ast.Attribute | ast.Subscript, frame: _Frame) -> None:
        inner = node.value
        if _is_name(inner, MCP):  # mcp.x or mcp[...]
            self.accounted.add(id(inner))
            prefix = MCP
            if id(node) in self.accounted:
                return
            if not isinstance(node.ctx, ast.Load):
                self.fail(node, _REBOUND)
                return
            if isinstance(node, ast.Attribute):
                self.fail(
                    node, f"{MCP}.{node.attr} must name a tool: {MCP}.{node.attr}.<tool>(...)"
                )
                return
        elif isinstance(inner, ast.Attribute) and _is_name(inner.value, MCP):  # mcp.x.y, mcp.x[...]
            self.accounted.update((id(inner), id(inner.value)))
            prefix = f"{MCP}.{inner.attr}"
        else:
            if isinstance(node, ast.Subscript) and _is_name(inner, ARGS):
                self.visit_args_item(node, frame)
            return
        found = _reference(node)
        if found is None:
            self.fail(
                node, f"dynamic names cannot be checked: {prefix}[...] needs a string literal"
            )
            return
        if isinstance(node, ast.Subscript):
            self.handled.add(id(node.slice))
        if not isinstance(node.ctx, ast.Load):
            self.fail(node, _REBOUND)
        line, column = node.lineno, self.source.column(node.lineno, node.col_offset)
        site = CallSite(found[0], found[1], line, column, id(node) in self.called)
        self.scan.references.append(Reference(site, self.place(node, frame)))

    def visit_args_item(self, node: ast.Subscript, frame: _Frame) -> None:
        key = literal_str(node.slice)
        self.handled.add(id(node.slice))
        if key is not None and isinstance(node.ctx, ast.Load):
            use = ArgsUse(key, False, False, False, None, node.lineno, self.place(node, frame))
            self.scan.args_uses.append(use)

    def visit_call(self, node: ast.Call, frame: _Frame) -> None:
        func = node.func
        found = _reference(func)
        if found is not None:
            self.called.add(id(func))
            if node.args:
                self.fail(node, f"{found[2]} takes keyword arguments only")
            for keyword in node.keywords:
                if keyword.arg is None:
                    continue  # ``**kwargs``: allowed, not lifted
                ok, value = literal_value(keyword.value)
                if ok:
                    place = self.place(keyword.value, frame)
                    use = LiteralUse(keyword.arg, value, True, keyword.value.lineno, place)
                    self.scan.literals.append(use)
                    self.handled.add(id(keyword.value))
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "get"
            and _is_name(func.value, ARGS)
            and not node.keywords
            and 1 <= len(node.args) <= 2
            and (key := literal_str(node.args[0])) is not None
        ):
            has_default = len(node.args) == 2
            ok, value = literal_value(node.args[1]) if has_default else (False, None)
            use = ArgsUse(key, True, has_default, ok, value, node.lineno, self.place(node, frame))
            self.scan.args_uses.append(use)
            self.handled.add(id(node.args[0]))
            if ok:
                self.handled.add(id(node.args[1]))

    def visit_string(self, node: ast.Constant, frame: _Frame) -> None:
        if frame.no_secrets or not holds_secret(frame.context, node.value):
            return
        use = LiteralUse(frame.context, node.value, False, node.lineno, self.place(node, frame))
        self.scan.literals.append(use)

    def push_children(self, frame: _Frame) -> None:
        node = frame.node
        if isinstance(node, ast.JoinedStr) and not split_secret(node):
            self.push_fstring(node, frame)
            return
        self.bound.update(binding_contexts(node))  # ``a, b = x, y``: bound a level down
        # ``password = "pw-" + suffix``: the pieces of a value are bound to its name too.
        inherit = isinstance(node, ast.List | ast.Tuple | ast.Set) or (
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
        )
        keys = {id(key) for key in node.keys if key} if isinstance(node, ast.Dict) else set[int]()
        # Constants in patterns cannot become expressions; dict keys are not secrets, nor are
        # bare string statements (docstrings): they do nothing when the code runs.
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        skip_all = docstring or isinstance(node, ast.pattern) or split_secret(node)
        for child in reversed(list(ast.iter_child_nodes(node))):  # popped in source order
            inherited = frame.context if inherit else ""
            context = self.bound.get(id(child), inherited)
            skip = skip_all or id(child) in keys or id(child) in self.handled
            self.push(child, frame, context=context, no_secrets=skip)

    def push_fstring(self, node: ast.JoinedStr, frame: _Frame) -> None:
        inner = self.source.span(node)
        values = node.values
        for index in reversed(range(len(values))):
            child = values[index]
            if not isinstance(child, ast.FormattedValue):
                self.push(child, frame, inner=inner, no_secrets=True)  # literal text
                continue
            # ``f"{expr=}"`` prints the expression's source: editing it would change the output.
            before = literal_str(values[index - 1]) if index > 0 else None
            start, end = self.source.span(child.value)
            expression = self.code[start:end].strip()
            debug = before is not None and before.rstrip().endswith("=") and expression in before
            self.push(child, frame, inner=inner, frozen=debug)


def scan_snippet(tree: ast.Module, code: str) -> Scan:
    """Walk a parsed snippet; ``InvalidInput`` (with the line) for the first rule it breaks."""
    mark_credential_aliases(tree)
    return _Walker(code).run(tree)
