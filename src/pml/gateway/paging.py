"""Opaque ``tools/list`` cursors: a page's start offset, encoded so clients do not rely on it.

cursor_for(10_000)          # "cG1sLXRvb2xzOjEwMDAw"
cursor_offset(that)         # 10000; anything else → INVALID_INPUT ("Invalid cursor ...")
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from pml.errors import InvalidInput

_CURSOR_PREFIX: Final = "pml-tools:"


def cursor_for(offset: int) -> str:
    """The opaque cursor of the page that starts at ``offset``."""
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{offset}".encode()).decode()


def cursor_offset(cursor: str) -> int:
    """Where the page of ``cursor`` starts; a cursor PML did not hand out is INVALID_INPUT."""
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
    except (UnicodeError, ValueError, binascii.Error):
        text = ""
    number = text.removeprefix(_CURSOR_PREFIX)
    if not text.startswith(_CURSOR_PREFIX) or not number.isdigit() or len(number) > 9:
        raise InvalidInput(
            "Invalid cursor: use the nextCursor of the previous page", field="cursor"
        )
    return int(number)
