"""Parsing snippets and hashing their normalised code.

A snippet is a module body that may use top-level ``await`` and ``return`` (SPEC §4);
``ast.parse`` accepts both, since the compiler, not the parser, rejects them. The code hash
is the SHA-256 of a canonical dump of the AST: formatting, comments, whitespace, quote style
and redundant parentheses do not change it, names and literals do (SPEC §6.1).

Example::

    >>> a = normalized_code_hash("x = await f( 'a' )  # read\\nreturn x")
    >>> b = normalized_code_hash('x = await f("a")\\n\\nreturn (x)')
    >>> a == b, len(a)
    (True, 64)
    >>> normalized_code_hash("return 1") == normalized_code_hash("return 2")
    False
"""

from __future__ import annotations

import ast
import hashlib
from typing import cast

from pml.errors import CodeSyntaxError, InvalidInput

# Fields that record how a value was spelled, not what it is: the ``u`` string prefix.
_SPELLING_FIELDS = frozenset({"kind", "type_comment"})


def _position(code: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of a character index."""
    line = code.count("\n", 0, index) + 1
    column = index - (code.rfind("\n", 0, index) + 1) + 1
    return line, column


def _syntax_error(line: int, column: int, message: str) -> CodeSyntaxError:
    return CodeSyntaxError(
        f"Syntax error at line {line}, column {column}: {message}", line=line, column=column
    )


def parse_snippet(code: str) -> ast.Module:
    """Parse a snippet (top-level ``await``/``return`` allowed); ``CodeSyntaxError`` if bad."""
    if not isinstance(code, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("code must be a string", field="code")
    null = code.find("\0")
    if null >= 0:
        raise _syntax_error(*_position(code, null), "source code cannot contain null bytes")
    try:
        return ast.parse(code, filename="<snippet>", mode="exec")
    except SyntaxError as exc:
        line = exc.lineno if exc.lineno is not None else 1
        column = exc.offset if exc.offset is not None else 1
        raise _syntax_error(line, column, exc.msg) from None
    except UnicodeEncodeError as exc:
        raise _syntax_error(*_position(code, exc.start), "invalid character (surrogate)") from None
    except (RecursionError, MemoryError):
        # CPython signals over-deep nesting this way (e.g. 10 000 chained ``+`` or unary ``-``).
        raise _syntax_error(1, 1, "code is too deeply nested") from None


class _Raw(str):
    """Text emitted as is by the canonical dump (structure, not a value)."""


def _scalar(value: object) -> str:
    return f"{type(value).__name__}:{value!r}"


def canonical_dump(tree: ast.AST) -> str:
    """A deterministic dump of ``tree`` without positions or spelling details."""
    out: list[str] = []
    # Iterative on purpose: ``ast.dump`` recurses and fails on deep but valid trees.
    stack: list[object] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item)
        elif isinstance(item, ast.AST):
            out.append(type(item).__name__ + "(")
            stack.append(_Raw(")"))
            fields = [f for f in item._fields if f not in _SPELLING_FIELDS]
            for name in reversed(fields):
                stack.append(_Raw(","))
                stack.append(getattr(item, name, None))
                stack.append(_Raw(name + "="))
        elif isinstance(item, list):
            out.append("[")
            stack.append(_Raw("]"))
            for element in reversed(cast("list[object]", item)):
                stack.append(_Raw(","))
                stack.append(element)
        else:
            out.append(_scalar(item))
    return "".join(out)


def normalized_code_hash(code: str) -> str:
    """Lowercase SHA-256 hex of the snippet's canonical AST dump."""
    return tree_hash(parse_snippet(code))


def tree_hash(tree: ast.AST) -> str:
    """``normalized_code_hash`` of an already parsed snippet (``parse_snippet``'s tree)."""
    dump = canonical_dump(tree)
    return hashlib.sha256(dump.encode("utf-8", "surrogatepass")).hexdigest()
