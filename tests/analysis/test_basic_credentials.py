"""The password of an HTTP Basic credential being encoded (``b64encode(b"user:pass")``) is
lifted though nothing names it (``pml.analysis.basic_credentials``)."""

from __future__ import annotations

import pytest

from pml.analysis.code_hash import parse_snippet
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import analyze_snippet
from pml.errors import InvalidInput

SECRET = "Zq8kLm2pXr5v"  # neither random-looking enough nor shaped like a token alone
B64 = "import base64\n"


def lifted(code: str) -> tuple[str, list[str]]:
    analysis = analyze_snippet(code)
    return analysis.lifted_code or code, sorted(p.name for p in analysis.parameters)


@pytest.mark.parametrize(
    "code",
    [
        f'{B64}return base64.b64encode(("%s:%s" % ("ada", "{SECRET}")).encode()).decode()',
        f'{B64}u = "ada"\np = "{SECRET}"\nreturn base64.b64encode(f"{{u}}:{{p}}".encode())',
        f'{B64}return base64.b64encode(b"ada:{SECRET}")',
        f'{B64}return base64.standard_b64encode("ada@example.com:{SECRET}".encode("utf-8"))',
        f'{B64}return base64.b64encode("{{}}:{{}}".format("ada", "{SECRET}").encode())',
        f'{B64}return base64.b64encode(("ada" + ":" + "{SECRET}").encode())',
        f'{B64}return base64.urlsafe_b64encode(":".join(("ada", "{SECRET}")).encode())',
        f'from base64 import b64encode\nreturn b64encode(bytes("ada:{SECRET}", "utf-8"))',
        f'{B64}pw = "  {SECRET} ".strip()\nreturn base64.encodebytes(f"ada:{{pw}}".encode())',
    ],
)
def test_the_password_of_an_encoded_basic_credential_is_lifted(code: str) -> None:
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert parameters
    assert find_secret(stored) is None
    parse_snippet(stored)


@pytest.mark.parametrize(
    "code",
    [
        f'{B64}return base64.b64encode(("%s:%s" % ("ada", "{SECRET}")).encode())',
        f'{B64}return base64.b64encode("{{}}:{{}}".format("ada", "{SECRET}").encode())',
        f'{B64}return base64.b64encode(("ada" + ":" + "{SECRET}").encode())',
    ],
)
def test_the_user_name_stays(code: str) -> None:
    stored, _ = lifted(code)
    assert SECRET not in stored
    assert '"ada"' in stored


@pytest.mark.parametrize(
    "code",
    [
        f"{B64}return base64.b64encode(b'key:value')",
        f"{B64}return base64.b64encode(b'https://example.com/a')",
        f"{B64}return base64.b64encode(b'12:30')",
        f"{B64}return base64.b64encode(b'a:b:c9x!zz')",
        f"{B64}return base64.b64encode(b'ada:')",
        f"{B64}return base64.b64encode(b':Zq8kLm2pXr5v')",
        f"{B64}return base64.b64encode('two words:Zq8kLm2pXr5v'.encode())",
        f"{B64}return base64.b64encode(data)",
        f"{B64}return base64.b64encode(json.dumps(payload).encode())",
        f"{B64}return base64.b64decode(b'ada:Zq8kLm2pXr5v=')",
    ],
)
def test_other_encodings_are_unchanged(code: str) -> None:
    stored, parameters = lifted(code)
    assert stored == code
    assert parameters == []


@pytest.mark.parametrize(
    "code",
    [
        # a template of many fields, or fields that do not pair with its values
        f'{B64}return base64.b64encode(("%s:%s:%s" % ("a", "b", "{SECRET}")).encode())',
        f'{B64}return base64.b64encode(("%s%s:%s" % ("a", "b")).encode())',
        f'{B64}return base64.b64encode("{{0}}:{{1}}".format(*pair).encode())',
        # a huge value, unicode, injection text
        f'{B64}return base64.b64encode(("ada:" + "{SECRET}" * 5000).encode())',
        f'{B64}return base64.b64encode("Ünïcødé:{SECRET}".encode())',
        f'{B64}return base64.b64encode(b"ada:{SECRET}\\"); DROP TABLE t;--")',
        f'{B64}return base64.b64encode(f"{{u}}:{{p}}:{{q}}".encode(), b"-_")',
    ],
)
def test_hostile_encodings_are_judged_without_error(code: str) -> None:
    stored, parameters = lifted(code)
    parse_snippet(stored)
    assert isinstance(parameters, list)
    if SECRET in stored:  # only where the secret is not the Basic password: judged as before
        assert find_secret(stored) is None


def test_a_password_in_bytes_that_are_not_utf8_refuses_the_capture_clearly() -> None:
    code = f"{B64}return base64.b64encode(b'ada:\\xff\\xfe{SECRET}')"
    with pytest.raises(InvalidInput, match="pass it in args instead"):
        lifted(code)
