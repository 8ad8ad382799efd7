"""Character positions of AST nodes, for 1-based columns and exact source-span edits.

``ast`` positions count lines the way the parser does (``\\n``, ``\\r\\n`` and a lone ``\\r``
end a line) and columns in UTF-8 bytes; this module turns them into character offsets of the
original string, so that edits keep every other character of the author's code.

Example::

    >>> import ast
    >>> code = 'x = "日本"; y = mcp.fs.read()'
    >>> node = ast.parse(code).body[1].value.func
    >>> source = SourceMap(code)
    >>> node.col_offset, source.column(node.lineno, node.col_offset)
    (18, 15)
    >>> start, end = source.span(node)
    >>> code[start:end]
    'mcp.fs.read'
"""

from __future__ import annotations

import ast
import re

_NEWLINE = re.compile(r"\r\n|\r|\n")


class SourceMap:
    """Maps ``(line, UTF-8 byte column)`` positions of one source string to characters."""

    __slots__ = ("_code", "_encoded", "_ends", "_starts")

    def __init__(self, code: str) -> None:
        self._code = code
        self._starts = [0]
        self._ends: list[int] = []
        for match in _NEWLINE.finditer(code):
            self._ends.append(match.start())
            self._starts.append(match.end())
        self._ends.append(len(code))
        self._encoded: dict[int, bytes] = {}

    def _line_bytes(self, line: int) -> bytes:
        encoded = self._encoded.get(line)
        if encoded is None:
            text = self._code[self._starts[line - 1] : self._ends[line - 1]]
            encoded = self._encoded[line] = text.encode("utf-8", "surrogatepass")
        return encoded

    def offset(self, line: int, byte_column: int) -> int:
        """Character offset in the code of a parser position (1-based line, byte column)."""
        prefix = self._line_bytes(line)[:byte_column]
        return self._starts[line - 1] + len(prefix.decode("utf-8", "surrogatepass"))

    def column(self, line: int, byte_column: int) -> int:
        """1-based character column of a parser position."""
        return self.offset(line, byte_column) - self._starts[line - 1] + 1

    def span(self, node: ast.expr) -> tuple[int, int]:
        """``(start, end)`` character offsets of an expression node."""
        end_line = node.end_lineno if node.end_lineno is not None else node.lineno
        end_column = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return self.offset(node.lineno, node.col_offset), self.offset(end_line, end_column)
