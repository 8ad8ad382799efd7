"""The second pass that keeps secrets out of stored code: everywhere lifting does not look.

``pml.analysis.lifting`` moves secret string literals into parameters. This pass takes the
code it produced and handles every other place a credential can be written:

- comments: the credential is replaced by ``[REDACTED]`` (``secret_comments``);
- docstrings and other bare string statements (they never run): redacted the same way;
- f-string text, format specs and the constants in f-string fields: replacement fields read
  parameters (``fstring_secrets``);
- bytes literals: ``args["token"].encode()``, the parameter holding the text (bytes that are
  not UTF-8 text are refused);
- constants glued together — ``"sk-" + "..."``, ``"".join([...])``, ``%``, ``.format``,
  ``bytes.fromhex`` (``folding``) — and dict keys: the whole expression becomes
  ``args["..."]``;
- a credential given by position after its name (``("X-Api-Key", "...")``,
  ``setattr(c, "password", "...")``: ``secret_pairs``): lifted like a keyword's value.

Names the code is checked against (``args["..."]`` keys, ``mcp`` tool names), match patterns
and identifiers cannot become parameters: ``secret_check`` refuses code that still holds a
credential there. The snippet the agent sent still runs as written; only the stored code is
the one this pass returns.

Example::

    >>> code = '# deploy: ghp_16C7e42F292c6912E7710c838347Ae178B4a\\nkey = b"sk-abcdefghijklmnop12"'
    >>> swept = sweep_secrets(code, SecretNames(set(), {}))
    >>> print(swept.code)
    # deploy: [REDACTED]
    key = args["key"].encode()
    >>> [(p.name, p.required) for p in swept.parameters]
    [('key', True)]
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from pml.analysis.bindings import binding_contexts
from pml.analysis.code_hash import canonical_dump, parse_snippet
from pml.analysis.credential_flow import mark_credential_aliases
from pml.analysis.folding import folded_text, is_compound, split_secret
from pml.analysis.fstring_secrets import fstring_rewrite
from pml.analysis.lifting import Edit, Parameter
from pml.analysis.secret_comments import comment_edits
from pml.analysis.secret_pairs import pair_contexts
from pml.analysis.secret_params import SecretNames, args_text, key_nodes
from pml.analysis.secret_text import REDACTED, holds_secret, redact_spans, secret_spans
from pml.analysis.source_map import SourceMap
from pml.errors import InternalError, InvalidInput

__all__ = ["SecretNames", "Swept", "apply_edits", "sweep_secrets"]


@dataclass(frozen=True, slots=True)
class Swept:
    """The code with no credential left where it can be moved, and the parameters added."""

    code: str
    parameters: tuple[Parameter, ...]


def apply_edits(code: str, edits: list[Edit]) -> str:
    """``code`` with non-overlapping ``edits`` applied."""
    parts: list[str] = []
    cursor = 0
    for edit in sorted(edits, key=lambda edit: edit.start):
        if edit.start < cursor:
            raise InternalError("overlapping edits while preparing the code to store")
        parts.extend((code[cursor : edit.start], edit.text))
        cursor = edit.end
    parts.append(code[cursor:])
    return "".join(parts)


def _as_text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _parses_to(text: str, expected: ast.expr) -> bool:
    try:
        parsed = ast.parse(f"({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return canonical_dump(parsed) == canonical_dump(expected)


def _carried(node: ast.AST) -> set[int] | None:
    """The children that keep the name ``node`` is bound to (``None``: all of them):
    the items of a list, tuple or set and the operands of ``+``/``*``; the text a slice or a
    method of a string constant is taken from, when the method reads nothing else
    (``password = "..."[::-1]``, ``token = "...".strip()``)."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.BinOp):
        return None
    if isinstance(node, ast.Subscript):
        return {id(node.value)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        plain = all(isinstance(a, ast.Constant) for a in [*node.args, *node.keywords])
        # ``"Bearer {}".format(t)``, ``":".join(parts)``: a template, not the credential
        return {id(node.func)} if plain and isinstance(node.func.value, ast.Constant) else set()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Constant):
        return {id(node.value)}
    return set()


class _Sweeper:
    def __init__(self, code: str, names: SecretNames) -> None:
        self.code = code
        self.source = SourceMap(code)
        self.names = names
        self.edits: list[Edit] = []

    def run(self, tree: ast.Module) -> None:
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        bound: dict[int, str] = {}  # ids of values → the names they are bound to
        while stack:
            node, context = stack.pop()
            if isinstance(node, ast.pattern):
                continue  # cannot be an expression: ``secret_check`` refuses a secret there
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.statement(node.value)
                continue
            if isinstance(node, ast.JoinedStr) and not split_secret(node):
                self.fstring(node, context)
                continue
            if isinstance(node, ast.expr) and self.lifted(node, context):
                continue
            bound.update(binding_contexts(node))  # ``a, b = x, y``: bound a level down
            bound.update(pair_contexts(node))  # ``("X-Api-Key", "...")``: bound by position
            carried = _carried(node)
            keys = {id(key) for key in key_nodes(node)}  # names: ``secret_check`` judges them
            for child in reversed(list(ast.iter_child_nodes(node))):
                if id(child) not in keys:
                    inherited = context if carried is None or id(child) in carried else ""
                    stack.append((child, bound.get(id(child), inherited)))

    def statement(self, node: ast.Constant) -> None:
        """A docstring or other bare string: its credentials redacted, nothing lifted."""
        value: object = node.value
        if not isinstance(value, str | bytes):
            return
        text = _as_text(value)
        spans = secret_spans(text)
        if not spans:
            return
        redacted = redact_spans(text, spans)
        expected = ast.Constant(
            redacted.encode("latin-1") if isinstance(value, bytes) else redacted
        )
        start, end = self.source.span(node)
        source = self.code[start:end]
        in_place = source
        for secret in sorted({text[a:b] for a, b in spans}, key=len, reverse=True):
            in_place = in_place.replace(secret, REDACTED)
        if not _parses_to(in_place, expected):  # written with escapes, or split: spelled anew
            in_place = repr(expected.value)
        self.edits.append(Edit(start, end, in_place))

    def fstring(self, node: ast.JoinedStr, context: str) -> None:
        text = fstring_rewrite(self.code, node, context, self.names)
        if text is not None:
            start, end = self.source.span(node)
            self.edits.append(Edit(start, end, text))

    def lifted(self, node: ast.expr, context: str) -> bool:
        """Whether ``node`` (a constant or constants glued together) was a secret, now lifted."""
        if not (isinstance(node, ast.Constant) or is_compound(node)):
            return False
        value = folded_text(node)
        if value is None:
            return False
        try:
            text = value.decode("utf-8") if isinstance(value, bytes) else value
        except UnicodeDecodeError:
            text = None
        if not holds_secret(context, _as_text(value) if text is None else text):
            return False
        start, end = self.source.span(node)
        if text is None or not _parses_to(self.code[start:end], node):
            what = "bytes that are not UTF-8 text" if text is None else "this expression"
            raise InvalidInput(
                f"a secret in {what} cannot be moved out of the code here: pass it in args "
                f"instead (line {node.lineno})",
                field="code",
                line=node.lineno,
            )
        replacement = args_text(self.names.name_for(context, text))
        if isinstance(value, bytes):
            replacement += ".encode()"
        self.edits.append(Edit(start, end, replacement))
        return True


def sweep_secrets(code: str, names: SecretNames) -> Swept:
    """``code`` (as lifting left it) with the credentials it still holds moved or redacted."""
    tree = parse_snippet(code)
    mark_credential_aliases(tree)
    sweeper = _Sweeper(code, names)
    try:
        sweeper.run(tree)
    except RecursionError:
        raise InvalidInput(
            "code is too deeply nested to check it for secrets", field="code"
        ) from None
    edits = sweeper.edits + comment_edits(code)
    if not edits:
        return Swept(code, ())
    return Swept(apply_edits(code, edits), tuple(names.parameters))
