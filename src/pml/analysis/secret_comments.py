"""Comments of a snippet, and the edits that redact the credentials written in them.

Comments never run, so a credential in one is not lifted into a parameter: it is replaced by
``[REDACTED]`` in the stored code and the rest of the comment stays (a private key written
over several comment lines is redacted up to its end marker). Comments are found with
``tokenize`` (a ``#`` inside a string is not a comment). The parser ends lines at ``\\n``,
``\\r\\n`` or a lone ``\\r``; ``tokenize`` does not know the lone ``\\r``, so it reads a copy
where each lone ``\\r`` is a ``\\n`` (same length: every offset stays true).

Example::

    >>> code = 'x = "#not a comment"  # key ghp_16C7e42F292c6912E7710c838347Ae178B4a\\r\\nreturn x'
    >>> [(c.line, c.start) for c in comments(code)]
    [(1, 22)]
    >>> edits = comment_edits(code)
    >>> [(e.start, e.end, e.text) for e in edits]
    [(22, 68, '# key [REDACTED]')]
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

from pml.analysis.lifting import Edit
from pml.analysis.secret_text import PEM_BEGIN as _PEM_BEGIN
from pml.analysis.secret_text import PEM_END as _PEM_END
from pml.analysis.secret_text import REDACTED, redact_spans, secret_spans
from pml.errors import InvalidInput

_LONE_CR = re.compile(r"\r(?!\n)")
_LINE_END = re.compile(r"\r\n|\n")


class UnreadableComments(InvalidInput):
    """``tokenize`` could not read code that ``ast`` parsed: its comments are unknown."""


@dataclass(frozen=True, slots=True)
class Comment:
    """One comment: its text (``#`` included), its character offset and its line."""

    text: str
    start: int
    line: int


def comments(code: str) -> list[Comment]:
    """Every comment of ``code`` (code that ``ast`` parsed); ``InvalidInput`` if the comments
    cannot be told from the code (then nothing could be redacted safely)."""
    if "#" not in code:
        return []
    normalized = _LONE_CR.sub("\n", code)
    starts = [0] + [match.end() for match in _LINE_END.finditer(normalized)]
    found: list[Comment] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(normalized).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                found.append(Comment(token.string, starts[row - 1] + column, row))
    except (tokenize.TokenError, SyntaxError, IndexError, RecursionError, MemoryError):
        raise UnreadableComments(
            "the comments of this code could not be read to keep secrets out of what is "
            "stored: remove the comments and send it again",
            field="code",
        ) from None
    return found


def comment_edits(code: str) -> list[Edit]:
    """The edits that replace each credential written in a comment by ``[REDACTED]``."""
    edits: list[Edit] = []
    in_key = False  # inside a private key written over several comment lines
    for comment in comments(code):
        text, end = comment.text, comment.start + len(comment.text)
        if in_key:
            closing = _PEM_END.search(text)
            in_key = closing is None
            kept = text[closing.end() :] if closing is not None else ""
            edits.append(Edit(comment.start, end, f"# {REDACTED}{kept}"))
            continue
        spans = secret_spans(text)
        begin = _PEM_BEGIN.search(text)
        in_key = begin is not None and _PEM_END.search(text, begin.end()) is None
        if spans:
            redacted = redact_spans(text, spans)
            if secret_spans(redacted):  # redaction made a new token: not expected, but refuse
                raise InvalidInput(
                    "a secret-looking text in a comment could not be redacted: remove it "
                    f"(line {comment.line})",
                    field="code",
                    line=comment.line,
                )
            edits.append(Edit(comment.start, end, redacted))
    return edits
