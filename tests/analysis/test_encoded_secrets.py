"""Credentials written encoded are found (``encoded_secrets``); ordinary encoded data is not."""

from __future__ import annotations

import ast
import base64
import codecs
import hashlib

import pytest

from pml.analysis.encoded_secrets import MAX_DECODED, encoded_secret
from pml.analysis.secret_check import check_stored
from pml.errors import InvalidInput

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
CODES = ", ".join(str(ord(c)) for c in GHP)


def found(code: str) -> tuple[int, str] | None:
    return encoded_secret(ast.parse(code))


@pytest.mark.parametrize(
    ("code", "how"),
    [
        (f"t = ''.join(map(chr, [{CODES}]))", "character codes"),
        (f"t = bytes(({CODES})).decode()", "character codes"),
        (f"t = ''.join(chr(c) for c in {{{CODES}}})", "character codes"),
        (f"t = bytes.fromhex('{GHP.encode().hex()}').decode()", "hex"),
        (f"t = bytes.fromhex('{GHP.encode().hex(':')}')", "hex"),
        (f"t = b64decode('{base64.b64encode(STRIPE.encode()).decode()}')", "base64"),
        (f"t = b64decode(b'{base64.urlsafe_b64encode(GHP.encode()).decode()}')", "base64"),
        (f"t = b64decode('{base64.b64encode(STRIPE.encode()).decode().rstrip('=')}')", "base64"),
        (f"t = '{GHP[::-1]}'[::-1]", "reversed text"),
        (f"t = codecs.decode('{codecs.encode(GHP, 'rot13')}', 'rot13')", "rot13"),
        (f"k = b64decode('{base64.b64encode(b'-----BEGIN PRIVATE KEY-----').decode()}')", "base64"),
    ],
)
def test_a_credential_in_a_common_encoding_is_found_with_its_line(code: str, how: str) -> None:
    result = found(f"x = 1\n{code}\nreturn t if False else 1")
    assert result is not None
    assert result[0] == 2
    assert how in result[1]
    with pytest.raises(InvalidInput) as raised:
        check_stored(f"x = 1\n{code}", [])
    assert GHP not in raised.value.message
    assert STRIPE not in raised.value.message


@pytest.mark.parametrize(
    "code",
    [
        f"d = bytes.fromhex('{hashlib.sha256(b'x').hexdigest()}')",
        f"d = b64decode('{base64.b64encode(hashlib.sha256(b'x').digest()).decode()}')",
        f"d = b64decode('{base64.b64encode(b'Hello world, this is fine.').decode()}')",
        "xs = [" + ", ".join(str(i) for i in range(40, 120)) + "]",
        "xs = (" + ", ".join("104" for _ in range(64)) + ")",
        f"r = '{'stressed desserts are fine'[::-1]}'",
        "u = 'ünïcödé text that is long enough to be decoded'",
        "codes = [" + ", ".join(str(ord(c)) for c in "an ordinary sentence, typed") + "]",
        "flags = [True] * 3 + [" + ", ".join("True" for _ in range(20)) + "]",
        "neg = [" + ", ".join(str(-ord(c)) for c in GHP) + "]",
        "big = [" + ", ".join(str(ord(c) + 1000) for c in GHP) + "]",
        "codecs.decode('nothing rot13 about this one', 'rot13')",
    ],
)
def test_ordinary_encoded_data_is_not_taken_for_a_credential(code: str) -> None:
    assert found(code) is None


def test_hostile_sizes_are_bounded() -> None:
    huge_list = "xs = [" + ", ".join(["65"] * 200_000) + "]"
    assert found(huge_list) is None
    beyond = base64.b64encode(("A" * MAX_DECODED + GHP).encode()).decode()
    assert found(f"t = '{beyond}'") is None  # longer than is decoded: read as written only
    nul_hex = ("00" * 64) + GHP.encode().hex()
    assert found(f"t = bytes.fromhex('{nul_hex}')") is None  # not printable: not text
