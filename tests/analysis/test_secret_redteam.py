"""Credential forms a red team got stored, now found; their look-alikes in ordinary code not.

Credential files' own formats (``.pgpass``, ``.netrc``, Oracle EZConnect), webhook URLs,
``sqlcmd -P``, a two-letter ``pw`` name, a JSON ``"pass"`` key, and credentials bound to
their name by position (header tuples, ``setattr``, ``setdefault``), and a credential
under a name behind a slice or a method (``password = "..."[::-1]``).
"""

from __future__ import annotations

import ast
import time

import pytest

from pml.analysis.config_secrets import config_file_spans
from pml.analysis.secret_check import find_secret
from pml.analysis.secret_pairs import pair_contexts
from pml.analysis.secret_text import REDACTED, secret_spans
from pml.analysis.snippet import analyze_snippet
from pml.policy.scrub import scrub, scrub_text

PASSWORD = "Summer2025Pw"


def found(text: str) -> list[str]:
    return [text[a:b] for a, b in secret_spans(text)]


@pytest.mark.parametrize(
    "text",
    [
        f"db.example.com:5432:app:ada:{PASSWORD}\n",
        f"# *:*:*:postgres:{PASSWORD}",
        f"echo 'localhost:5432:app:ada:{PASSWORD}' >> ~/.pgpass",
        f"connect with db.internal:6432:app:ada:{PASSWORD}",
        f"machine api.example.com login ada password {PASSWORD}",
        f"machine api.example.com\n  login ada\n  password {PASSWORD}\n",
        f"default login ada password {PASSWORD}",
        f"ada/{PASSWORD}@db.example.com:1521/ORCL",
        f"sqlplus scott/{PASSWORD}@//db:1521/XEPDB1",
        f"sqlcmd -S db -U sa -P {PASSWORD} -Q 'select 1'",
        f"bcp dbo.t out t.csv -S db -U sa -P{PASSWORD}",
        f'{{"user": "ada", "pass": "{PASSWORD}"}}',
        f"pw: {PASSWORD}",
        f"log in as ada, pw {PASSWORD}",
    ],
)
def test_credential_file_formats_and_short_names_are_found_and_redacted(text: str) -> None:
    assert found(text) == [PASSWORD]
    assert PASSWORD not in scrub_text(text)
    assert REDACTED in scrub({"note": text})["note"]


def test_a_password_with_no_digit_in_a_netrc_entry_is_found() -> None:
    assert found("machine h\n  login ada\n  password correcthorsebattery\n") == [
        "correcthorsebattery"
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T0A1B2C3D/B0E1F2G3H/AbCdEf0123456789ghIJ",
        "https://discord.com/api/webhooks/123456789012345678/" + "aB3-dE5_fG7h" * 6,
    ],
)
def test_webhook_urls_are_credentials(url: str) -> None:
    assert found(f"post to {url} when done")
    assert find_secret(f'u = "{url}"\nreturn 1') is not None


@pytest.mark.parametrize(
    "text",
    [
        "hostname:port:database:username:password",  # the .pgpass documentation
        "localhost:5432:*:postgres:${PGPASSWORD}",
        "12:30:45:123:abcdef",  # a time, not a host
        "fe:80:aa:bb:cc:ddee",
        "images/icon@2x.png",
        "node_modules/lodash@4.17.21",
        "scott/{password}@db:1521/x",
        "user/pass@host:1521",
        "Single pass: adjacent intervals are merged",
        "you can pass :data:`h11.CLIENT` here",
        "DEBUG=pw:api,pw:channel",
        "sqlcmd -S db -U sa -P $SQLPW",
        "machine api.example.com login ada password ${NETRC_PASSWORD}",
        "https://hooks.slack.com/services/",
    ],
)
def test_look_alikes_in_ordinary_text_are_left_alone(text: str) -> None:
    assert found(text) == []
    assert scrub_text(text) == text


def stored(code: str) -> tuple[str, list[str]]:
    analysis = analyze_snippet(f"{code}\nreturn 1")
    return analysis.lifted_code, [p.name for p in analysis.parameters]


@pytest.mark.parametrize(
    ("code", "expected", "name"),
    [
        (
            f'h = [("Accept", "json"), ("X-Api-Key", "{PASSWORD}")]',
            'h = [("Accept", "json"), ("X-Api-Key", args["x_api_key"])]',
            "x_api_key",
        ),
        (
            f'setattr(c, "password", "{PASSWORD}")',
            'setattr(c, "password", args["password"])',
            "password",
        ),
        (
            f'env.setdefault("DB_PASSWORD", "{PASSWORD}")',
            'env.setdefault("DB_PASSWORD", args["db_password"])',
            "db_password",
        ),
        (
            f'd = {{"user": "ada", "pass": "{PASSWORD}"}}',
            'd = {"user": "ada", "pass": args["password"]}',
            "password",
        ),
        (f'pw = "{PASSWORD}"', 'pw = args["pw"]', "pw"),
        (f'password = "{PASSWORD[::-1]}"[::-1]', 'password = args["password"][::-1]', "password"),
        (
            f'token = "{PASSWORD}".encode("utf-8")',
            'token = args["token"].encode("utf-8")',
            "token",
        ),
        (f'n = "db:5432:app:ada:{PASSWORD}"', 'n = args["n"]', "n"),
    ],
)
def test_credentials_bound_by_position_or_written_in_file_formats_are_lifted(
    code: str, expected: str, name: str
) -> None:
    lifted, parameters = stored(code)
    assert lifted.splitlines()[0] == expected
    assert name in parameters
    assert PASSWORD not in lifted


@pytest.mark.parametrize(
    "code",
    [
        'choices = [("password", "Password"), ("token", "Token")]',
        'fields = ("password", "password_confirm")',
        'names = ["SOCKS5AuthReply", "SOCKS5AuthMethod2"]',
        'pair = ("refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer")',
        'cmd = ("--mode=creds", "--output=json")',
        'x = ("ssh2_auth_none", "ssh2_auth_password")',
        'm = MovedAttribute("HTTPPasswordMgr", "urllib2", "urllib.request")',
        'setattr(c, "password", "Enter your password")',
        'setattr(c, "password", "${DB_PASSWORD}")',
        'd = {"pass": 3, "fail": "ok"}',
        'd = {"pass": "yes"}',
        'password = config["db_password_field"]',
        'auth = "Bearer {}".format(token)',
        'password = ":".join([user, "x"])',
    ],
)
def test_pairs_of_names_and_labels_bind_nothing(code: str) -> None:
    lifted, _ = stored(code)
    assert lifted.splitlines()[0] == code


def test_pair_contexts_takes_any_node_and_hostile_values() -> None:
    for source in (
        "(1, 2)",
        '("password", 3)',
        '("password",)',
        'f("password", *rest)',
        f'("password", "{"é" * 5000}")',
        f'("pass\\u200bword", "{PASSWORD}")',
        '{**base, "pass": "x"}',
    ):
        node = ast.parse(source, mode="eval").body
        assert pair_contexts(node) == {}
    assert pair_contexts(ast.parse("x = 1").body[0]) == {}
    unicode = ast.parse(f'("пароль_password", "Пароль{PASSWORD}")', mode="eval").body
    assert list(pair_contexts(unicode).values()) == ["пароль_password"]


@pytest.mark.parametrize(
    "text",
    [
        (" " + "x:1:" * 63) * 2000,
        " a" * 200_000,
        "machine " * 50_000,
        ("a/" + "b" * 100 + "@" + "c" * 200 + " ") * 500,
        "a/b@" * 100_000,
        "sqlcmd " + "-P" * 100_000,
        "\u0000\ud800" * 10_000,
    ],
)
def test_the_new_finders_stay_linear_on_hostile_text(text: str) -> None:
    started = time.perf_counter()
    config_file_spans(text)
    secret_spans(text[:100_000])
    assert time.perf_counter() - started < 2.0


def test_wrong_types_are_not_credentials() -> None:
    assert scrub({"pass": None, "pw": True, "note": 12}) == {
        "pass": None,
        "pw": True,
        "note": 12,
    }
    assert scrub({"pw": PASSWORD}) == {"pw": REDACTED}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('smtp.login("ada", "Summer2025x")', 'smtp.login("ada", args["password"])'),
        ('a = HTTPBasicAuth(u, "s3cr3t!x")', 'a = HTTPBasicAuth(u, args["password"])'),
        ('conn.bind_s("cn=admin", "Summer2025x")', 'conn.bind_s("cn=admin", args["password"])'),
        ('u.set_password("x", "Summer2025x")', 'u.set_password("x", args["password"])'),
    ],
)
def test_the_password_of_a_call_that_signs_in_is_lifted(code: str, expected: str) -> None:
    lifted, parameters = stored(code)
    assert lifted.splitlines()[0] == expected
    assert parameters == ["password"]


@pytest.mark.parametrize(
    "code",
    [
        'login("ada", "read")',
        'auth("scope", "profile")',
        "client.login(user, pw)",
        'login("Summer2025x")',
        'client.login("ada", "${PASSWORD}")',
        'client.log("ada", "Summer2025x")',
        'login("ada", "--help")',
    ],
)
def test_other_calls_and_values_of_a_sign_in_stay_as_written(code: str) -> None:
    lifted, parameters = stored(code)
    assert lifted.splitlines()[0] == code
    assert parameters == []
