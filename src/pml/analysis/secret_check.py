"""The last check before code is stored: no credential left anywhere in it (SPEC §6.1).

``find_secret(code)`` reads code as it would be stored — every string and bytes constant
(docstrings, dict keys, match patterns, f-string text included), constants glued together
or encoded (``encoded_secrets``), every comment and every identifier — and returns where
the first credential-looking text is, and in what; ``None`` when there is none. Capture
refuses code for which it finds one after lifting and redaction (``check_stored``), and
bundle export leaves such a capability out.
The finding never quotes the secret.

Example::

    >>> find_secret('x = "fine"  # token: ghp_16C7e42F292c6912E7710c838347Ae178B4a')
    Finding(line=1, what='a comment')
    >>> find_secret('match e:\\n    case "sk-abcdefghijklmnop1234": pass')
    Finding(line=2, what='a match pattern')
    >>> find_secret('total_count_of_items_2024 = sha256_of_report(args["path"])') is None
    True
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from pml.analysis.bindings import binding_contexts
from pml.analysis.code_hash import parse_snippet
from pml.analysis.credential_flow import mark_credential_aliases
from pml.analysis.credentials import is_secret_keyword, keyword_words, looks_secret
from pml.analysis.encoded_secrets import encoded_secret
from pml.analysis.folding import folded_text, is_compound
from pml.analysis.glued_secrets import glued_prefix
from pml.analysis.lifting import Parameter
from pml.analysis.secret_comments import UnreadableComments, comments
from pml.analysis.secret_params import key_nodes
from pml.analysis.secret_text import holds_secret, secret_spans
from pml.errors import InvalidInput

_PIN_LIKE = 1000  # four digits and more under a credential name are a credential
# The names whose number is the credential itself (``password = 83749203``), not a count
# about credentials (``passwords_seen = 2024``, ``token_budget = 4096``).
_NUMBER_SECRETS = frozenset({"password", "passwd", "pwd", "passcode", "passkey", "pin", "secret"})


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a credential-looking text is (1-based line) and in what kind of code."""

    line: int
    what: str


def _identifiers(node: ast.AST) -> list[str]:
    """The names ``node`` itself spells (not its children's)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return [node.name or ""]
    if isinstance(node, ast.MatchMapping):
        return [node.rest or ""]
    if isinstance(node, ast.MatchClass):
        return list(node.kwd_attrs)
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def _text_of(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return None


def _kind(node: ast.AST, in_pattern: bool, key: bool) -> str:
    if in_pattern:
        return "a match pattern"
    if key:
        return "a name the code is checked against (args key or tool name)"
    if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
        return "a bytes literal"
    return "a string" if isinstance(node, ast.Constant) else "an expression of constants"


def _in_tree(tree: ast.Module) -> Finding | None:
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, False)]
    found: list[Finding] = []
    while stack:
        node, in_pattern, key = stack.pop()
        line: int = getattr(node, "lineno", 1)
        if any(looks_secret("", name) for name in _identifiers(node) if len(name) >= 16):
            found.append(Finding(line, "a name"))
        if isinstance(node, ast.Constant) or (isinstance(node, ast.expr) and is_compound(node)):
            text = _text_of(node.value) if isinstance(node, ast.Constant) else None
            if text is None and not isinstance(node, ast.Constant):
                folded = folded_text(node)
                text = None if folded is None else _text_of(folded)
            if text is not None and holds_secret("", text):
                found.append(Finding(line, _kind(node, in_pattern, key)))
        found.extend(Finding(line, "a number under a credential name") for _ in _numbers(node))
        pattern = in_pattern or isinstance(node, ast.pattern)
        keys = {id(child) for child in key_nodes(node)}
        stack.extend(
            (child, pattern, key or id(child) in keys) for child in ast.iter_child_nodes(node)
        )
    glued = glued_prefix(tree)
    if glued is not None:
        found.append(Finding(glued, "a credential glued together from pieces"))
    encoded = encoded_secret(tree)
    if encoded is not None:
        found.append(Finding(*encoded))
    return min(found, key=lambda finding: finding.line) if found else None


def _numbers(node: ast.AST) -> list[str]:
    """The names of credentials ``node`` binds to a number (``password = 83749203``)."""
    numbers = [
        child
        for child in ast.iter_child_nodes(node)
        if isinstance(child, ast.Constant)
        and type(child.value) is int
        and abs(child.value) >= _PIN_LIKE
    ]
    if not numbers:
        return []
    contexts = binding_contexts(node)  # once per node: it reads every child
    return [
        name
        for child in numbers
        if (name := contexts.get(id(child))) is not None
        and is_secret_keyword(name)
        and keyword_words(name)[-1].rstrip("0123456789") in _NUMBER_SECRETS
    ]


def find_secret(code: str, *, read_comments: bool = True) -> Finding | None:
    """The first credential-looking text in ``code`` (see the module doc), or ``None``.

    ``read_comments=False`` skips the comments (for code whose comments were just redacted).
    """
    tree = parse_snippet(code)
    mark_credential_aliases(tree)
    try:
        found = comments(code) if read_comments else []
    except UnreadableComments:  # unknown comments may hold anything
        return Finding(1, "comments that could not be read")
    in_comments = [Finding(c.line, "a comment") for c in found if secret_spans(c.text)]
    in_code = _in_tree(tree)
    candidates = [*in_comments, *([in_code] if in_code else [])]
    return min(candidates, key=lambda finding: finding.line) if candidates else None


def schema_secret(parameters: Iterable[Parameter]) -> str | None:
    """The first parameter whose name or default looks like a credential, if any."""
    for parameter in parameters:
        if looks_secret("", parameter.name) and len(parameter.name) >= 16:
            return parameter.name
        if "default" in parameter.schema and holds_secret(
            parameter.name, parameter.schema["default"]
        ):
            return parameter.name
    return None


def check_stored(code: str, parameters: Iterable[Parameter], *, read_comments: bool = True) -> None:
    """``InvalidInput`` when the code to store, or its parameters, still hold a credential."""
    finding = find_secret(code, read_comments=read_comments)
    if finding is not None:
        raise InvalidInput(
            f"a secret-looking text in {finding.what} cannot be moved out of the code: "
            f"pass it in args instead (line {finding.line})",
            field="code",
            line=finding.line,
        )
    if schema_secret(parameters) is not None:
        raise InvalidInput(
            "a parameter name or default value looks like a secret: pass it in args instead",
            field="code",
        )
