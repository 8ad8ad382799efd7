"""Secrets inside an f-string: its text, its format specs, the constants in its expressions.

``fstring_rewrite(code, node, context, names)`` returns the source that replaces the
outermost f-string ``node`` (``None`` when it holds no secret). A credential in the f-string's
text becomes a replacement field reading a parameter — ``f"Bearer sk-..."`` is stored as
``f"Bearer {args['token']}"``, which prints the same text when called with the secret — and a
secret constant (or constants glued into one) in an expression becomes ``args[...]``. The
f-string is first edited where it stands (the author's spelling kept) and, when that is not
possible (the secret is written with escapes or split over implicit concatenation), written
anew with ``ast.unparse``. Either text must parse to exactly the expected tree, or
``InvalidInput`` refuses the code: nothing is stored as written.

Example::

    >>> import ast
    >>> from pml.analysis.secret_params import SecretNames
    >>> code = 'h = f"Bearer sk-abcdefghijklmnop1234 for {user}"'
    >>> node = ast.parse(code).body[0].value
    >>> print(fstring_rewrite(code, node, "auth_header", SecretNames(set(), {})))
    f"Bearer {args['auth_header']} for {user}"
"""

from __future__ import annotations

import ast
import copy

from pml.analysis.code_hash import canonical_dump
from pml.analysis.folding import folded_text, is_compound
from pml.analysis.secret_params import SecretNames, args_item, encoded, key_nodes
from pml.analysis.secret_text import holds_secret, secret_spans
from pml.analysis.source_map import SourceMap
from pml.errors import InvalidInput

_QUOTES = ("'", '"', "'''", '"""')


class _Rewriter:
    """Builds the expected f-string tree, noting which text went into which parameter."""

    def __init__(self, context: str, names: SecretNames, line: int) -> None:
        self.context = context
        self.names = names
        self.line = line
        self.text_lifts: dict[str, str] = {}  # secret text -> parameter (lifted from text)
        self.other_lifts = 0  # secrets lifted from expressions (no in-place edit for those)

    def joined(self, node: ast.JoinedStr, context: str) -> ast.JoinedStr:
        values: list[ast.expr] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                values.extend(self.text(value.value, context))
            elif isinstance(value, ast.FormattedValue):
                spec = value.format_spec
                new_spec = self.joined(spec, "") if isinstance(spec, ast.JoinedStr) else spec
                new_value = self.expression(value.value)
                values.append(ast.FormattedValue(new_value, value.conversion, new_spec))
            else:
                values.append(value)
        return ast.JoinedStr(values)

    def text(self, text: str, context: str) -> list[ast.expr]:
        spans = secret_spans(text)
        stripped = text.strip()
        if not spans and len(stripped) >= 4 and context and holds_secret(context, text):
            # ``password = f"hunter{n}"``: the text of a credential-named value
            start = text.index(stripped)
            spans = [(start, start + len(stripped))]
        pieces: list[ast.expr] = []
        cursor = 0
        for start, end in spans:
            secret = text[start:end]
            name = self.names.name_for(context or self.context, secret)
            self.text_lifts[secret] = name
            if start > cursor:
                pieces.append(ast.Constant(text[cursor:start]))
            pieces.append(ast.FormattedValue(args_item(name), -1, None))
            cursor = end
        if cursor < len(text):
            pieces.append(ast.Constant(text[cursor:]))
        return pieces

    def expression(self, node: ast.expr) -> ast.expr:
        """``node`` with its secret constants (and glued constants) read from ``args``."""
        if isinstance(node, ast.JoinedStr):
            return self.joined(node, "")
        if isinstance(node, ast.Constant) or is_compound(node):
            value = folded_text(node)
            if value is not None:
                text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                if holds_secret("", text):
                    return self.lift(value)
        self.children(node)
        return node

    def child(self, item: object, keys: set[int]) -> object:
        if isinstance(item, ast.expr):
            return item if id(item) in keys else self.expression(item)
        if isinstance(item, ast.keyword | ast.comprehension | ast.arguments):
            self.children(item)
        return item

    def children(self, node: ast.AST) -> None:
        """Each child expression rewritten, except names (``args["k"]``: the key stays)."""
        keys = {id(key) for key in key_nodes(node)}
        for name, field in ast.iter_fields(node):
            if isinstance(field, ast.expr):
                setattr(node, name, self.child(field, keys))
            elif isinstance(field, list):
                items: list[object] = field  # pyright: ignore[reportUnknownVariableType]
                setattr(node, name, [self.child(item, keys) for item in items])
            elif isinstance(field, ast.keyword | ast.comprehension | ast.arguments):
                self.children(field)

    def lift(self, value: str | bytes) -> ast.expr:
        if isinstance(value, bytes):
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                raise _refusal(self.line, "bytes that are not UTF-8 text") from None
            self.other_lifts += 1
            return encoded(args_item(self.names.name_for("", text)))
        self.other_lifts += 1
        return args_item(self.names.name_for("", value))


def _refusal(line: int, what: str) -> InvalidInput:
    return InvalidInput(
        f"a secret in {what} cannot be moved out of the code here: pass it in args instead "
        f"(line {line})",
        field="code",
        line=line,
    )


def _matches(text: str, expected: str) -> bool:
    try:
        parsed = ast.parse(f"({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return canonical_dump(parsed) == expected


def _in_place(source: str, lifts: dict[str, str], expected: str) -> str | None:
    """The f-string's own text with each secret replaced by a field, if that parses right."""
    for quote in _QUOTES:
        text = source
        for secret in sorted(lifts, key=len, reverse=True):
            if secret not in text:
                return None
            text = text.replace(secret, f"{{args[{quote}{lifts[secret]}{quote}]}}")
        if _matches(text, expected):
            return text
    return None


def fstring_rewrite(code: str, node: ast.JoinedStr, context: str, names: SecretNames) -> str | None:
    """The text replacing the outermost f-string ``node`` of ``code``; see the module doc."""
    rewriter = _Rewriter(context, names, node.lineno)
    try:
        rewritten = rewriter.joined(copy.deepcopy(node), context)
    except RecursionError:
        raise _refusal(node.lineno, "an f-string nested this deeply") from None
    if not rewriter.text_lifts and not rewriter.other_lifts:
        return None
    expected = canonical_dump(rewritten)
    start, end = SourceMap(code).span(node)
    if not rewriter.other_lifts:
        text = _in_place(code[start:end], rewriter.text_lifts, expected)
        if text is not None:
            return text
    try:
        text = ast.unparse(rewritten)
    except (ValueError, RecursionError):
        text = None
    if text is not None and _matches(text, expected):
        return text
    raise _refusal(node.lineno, "this f-string")
