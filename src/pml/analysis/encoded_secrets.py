"""A credential written encoded: character codes, hex, base64, reversed or rot13.

``"".join(map(chr, [103, 104, 112, 95, ...]))``, ``bytes.fromhex("6768705f...")``,
``base64.b64decode("Z2hwXz...")``, ``"...B4a_phg"[::-1]``: the constant as written holds no
known credential shape, the value the code makes of it does. Each string, bytes and
character-code constant is also read the ways code commonly decodes it, and a decoded text
holding a known credential shape (``token_shapes``) or a private key's PEM header means a
credential is stored: capture refuses the code (it cannot be lifted as written).

Only texts that decode cleanly count: hex and base64 must decode to printable ASCII, a run
of numbers must all be printable character codes, and rot13 is read only in code that names
it. Digests, ids and data arrays decode to bytes no credential shape matches.

Example::

    >>> import ast
    >>> codes = ", ".join(str(ord(c)) for c in "ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    >>> encoded_secret(ast.parse(f"t = ''.join(map(chr, [{codes}]))"))
    (1, 'a credential written as character codes')
    >>> encoded_secret(ast.parse("digest = bytes.fromhex('9f86d081884c7d659a2feaa0c55ad015')"))
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import re
from collections.abc import Iterator
from typing import Final

from pml.analysis.secret_text import PEM_BEGIN
from pml.analysis.token_shapes import CREDENTIAL_SHAPES

MIN_ENCODED: Final = 16  # shorter than any credential shape: never decoded
MAX_DECODED: Final = 1 << 20  # a constant longer than this is read as written only
_HEX: Final = re.compile(r"(?:[0-9a-fA-F]{2}[\s:]?){16,}")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_\-\s]{16,}={0,2}")
_PRINTABLE: Final = re.compile(r"[\x20-\x7e\t\r\n]*")


def encoded_secret(tree: ast.AST) -> tuple[int, str] | None:
    """The line of the first encoded credential in ``tree``, and how it is encoded."""
    texts: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line: int = getattr(node, "lineno", 1)
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and len(node.elts) >= MIN_ENCODED:
            text = _char_codes(node.elts)
            if text is not None and _is_credential(text):
                return line, "a credential written as character codes"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            value = node.value
            texts.append((line, value.decode("latin-1") if isinstance(value, bytes) else value))
    rot13 = any(text in ("rot13", "rot_13") for _, text in texts)
    for line, text in texts:
        if MIN_ENCODED <= len(text) <= MAX_DECODED:
            for how, decoded in _decodings(text, rot13=rot13):
                if _is_credential(decoded):
                    return line, f"a credential encoded as {how}"
    return None


def _is_credential(text: str) -> bool:
    return CREDENTIAL_SHAPES.search(text) is not None or PEM_BEGIN.search(text) is not None


def _char_codes(elements: list[ast.expr]) -> str | None:
    """The text a run of printable character codes spells, if every element is one."""
    codes: list[int] = []
    for element in elements:
        if not isinstance(element, ast.Constant) or type(element.value) is not int:
            return None
        if not 32 <= element.value <= 126:
            return None
        codes.append(element.value)
    return "".join(map(chr, codes))


def _decodings(text: str, *, rot13: bool) -> Iterator[tuple[str, str]]:
    """``text`` read as the encodings it may be in (see the module)."""
    yield "reversed text", text[::-1]
    if rot13:
        yield "rot13", codecs.encode(text, "rot13")
    stripped = text.strip()
    if _HEX.fullmatch(stripped):
        decoded = _printable(_unhex(stripped))
        if decoded is not None:
            yield "hex", decoded
    if _BASE64.fullmatch(stripped):
        for decoded in (_unbase64(stripped, b"+/"), _unbase64(stripped, b"-_")):
            if decoded is not None and (shown := _printable(decoded)) is not None:
                yield "base64", shown
                break


def _unhex(text: str) -> bytes:
    try:
        return bytes.fromhex(re.sub(r"[\s:]", "", text))
    except ValueError:
        return b""


def _unbase64(text: str, altchars: bytes) -> bytes | None:
    compact = re.sub(r"\s", "", text)
    padded = compact + "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(padded, altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return None


def _printable(data: bytes) -> str | None:
    if not data:
        return None
    text = data.decode("latin-1")
    return text if _PRINTABLE.fullmatch(text) else None
