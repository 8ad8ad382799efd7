"""Display-name globs (``cap_list {pattern: "fs:*"}``) as SQL ``LIKE`` patterns.

``*`` matches any run of characters and ``?`` exactly one; every other character is literal,
so ``%``, ``_`` and the escape character itself are escaped with :data:`LIKE_ESCAPE`. Use
the result as ``display_name LIKE :pattern ESCAPE '\\'``. SQLite's ``LIKE`` ignores ASCII
case unless ``PRAGMA case_sensitive_like=ON``; PostgreSQL's is case-sensitive.

Example::

    >>> glob_to_like("fs:*"), glob_to_like("a_b?"), glob_to_like("100%")
    ('fs:%', 'a\\\\_b_', '100\\\\%')
"""

from __future__ import annotations

from pml.errors import InvalidInput

LIKE_ESCAPE = "\\"
MAX_PATTERN_LENGTH = 256

_TRANSLATION = str.maketrans(
    {
        "*": "%",
        "?": "_",
        "%": LIKE_ESCAPE + "%",
        "_": LIKE_ESCAPE + "_",
        LIKE_ESCAPE: LIKE_ESCAPE + LIKE_ESCAPE,
    }
)


def glob_to_like(pattern: str) -> str:
    """The SQL ``LIKE`` pattern (escape ``\\``) matching what the glob ``pattern`` matches."""
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_LENGTH:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput(
            f"pattern must be a string of at most {MAX_PATTERN_LENGTH} characters",
            field="pattern",
        )
    return pattern.translate(_TRANSLATION)
