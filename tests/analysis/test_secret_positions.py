"""Credentials given by position to what the snippet defines, or paired by ``zip``, are
lifted like ones given by keyword (``pml.analysis.credential_calls``)."""

from __future__ import annotations

import pytest

from pml.analysis.code_hash import parse_snippet
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import analyze_snippet

SECRET = "Zq8kLm2pXr5v"  # neither random-looking enough nor shaped like a token alone


def lifted(code: str) -> tuple[str, list[str]]:
    analysis = analyze_snippet(code)
    return analysis.lifted_code or code, sorted(p.name for p in analysis.parameters)


DEF = "def connect_db(host, user, password):\n    return host\n"


@pytest.mark.parametrize(
    ("code", "parameter"),
    [
        (f'{DEF}return connect_db("db", "ada", "{SECRET}")', "password"),
        (f'async def go(url, token):\n    return url\nreturn await go("u", "{SECRET}")', "token"),
        (f'mk = lambda user, passwd: user\nreturn mk("ada", "{SECRET}")', "passwd"),
        (
            "from dataclasses import dataclass\n@dataclass\nclass Creds:\n"
            f'    user: str\n    password: str\nreturn Creds("ada", "{SECRET}")',
            "password",
        ),
        (
            "from typing import NamedTuple\nclass Creds(NamedTuple):\n"
            f'    user: str\n    api_key: str\nreturn Creds("ada", "{SECRET}")',
            "api_key",
        ),
        (
            "class Client:\n    def __init__(self, url, api_key):\n        self.k = api_key\n"
            f'return Client("http://x", "{SECRET}")',
            "api_key",
        ),
        (
            "class Client:\n    def auth(self, user, secret):\n        return user\n"
            f'return Client().auth("ada", "{SECRET}")',
            "secret",
        ),
        (
            "class Client:\n    @staticmethod\n    def auth(user, secret):\n        return user\n"
            f'return Client.auth("ada", "{SECRET}")',
            "secret",
        ),
        (
            'from collections import namedtuple\nCreds = namedtuple("Creds", "user password")\n'
            f'c = Creds("ada", "{SECRET}")\nreturn c.password',
            "password",
        ),
        (
            'import collections\nCreds = collections.namedtuple("C", ["user", "token"])\n'
            f'return Creds("ada", "{SECRET}")',
            "token",
        ),
        (
            'import typing\nCreds = typing.NamedTuple("C", [("user", str), ("pwd", str)])\n'
            f'return Creds("ada", "{SECRET}")',
            "pwd",
        ),
        (f'creds = dict(zip(["user", "password"], ["ada", "{SECRET}"]))\nreturn creds', "password"),
        (
            f'keys = ("user", "password")\nvals = ("ada", "{SECRET}")\n'
            "return dict(zip(keys, vals))",
            "password",
        ),
        (f'return {{k: v for k, v in zip(["user", "token"], ["ada", "{SECRET}"])}}', "token"),
        (
            f'd = {{}}\nfor k, v in zip(["user", "token"], ["ada", "{SECRET}"]):\n'
            "    d[k] = v\nreturn d",
            "token",
        ),
        # a spread tuple: its elements by position from where it is spread
        (f'{DEF}pair = ("ada", "{SECRET}")\nreturn connect_db("db", *pair)', "password"),
        (f'{DEF}return connect_db("db", *["ada", "{SECRET}"])', "password"),
        # a call that signs in takes the password last, spread or not
        (f'pair = ("ada", "{SECRET}")\nreturn smtp.login(*pair)', "password"),
        (f'return client.authenticate(*["ada", "{SECRET}"])', "password"),
        # through a name, a transform and a recursive call
        (f'{DEF}pw = "{SECRET}".strip()\nreturn connect_db("db", "ada", pw)', "pw"),
        (f'def f(a, password):\n    return f(password, a)\nreturn f("x", "{SECRET}")', "password"),
    ],
)
def test_a_credential_given_by_position_is_lifted(code: str, parameter: str) -> None:
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert parameter in parameters
    assert find_secret(stored) is None
    parse_snippet(stored)  # still a snippet


@pytest.mark.parametrize(
    ("code", "kept"),
    [
        (f'{DEF}return connect_db("db.internal", "ada", "{SECRET}")', '"db.internal"'),
        (f'{DEF}return connect_db("db", "ada_admin", "{SECRET}")', '"ada_admin"'),
        (f'creds = dict(zip(["user", "password"], ["ada_admin", "{SECRET}"]))', '"ada_admin"'),
    ],
)
def test_the_other_positions_keep_their_constants(code: str, kept: str) -> None:
    stored, _ = lifted(code + "\nreturn 1")
    assert SECRET not in stored
    assert kept in stored


@pytest.mark.parametrize(
    "code",
    [
        # no credential among the parameters, or not at the position
        'def area(w, h):\n    return w * h\nreturn area("3", "4")',
        'def trim(text, max_tokens):\n    return text[:max_tokens]\nreturn trim("hello", 5)',
        f'{DEF}return connect_db("db", "ada")',
        # what the rules for a keyword leave, they leave by position too
        f'{DEF}return connect_db("db", "ada", "")',
        f'{DEF}return connect_db("db", "ada", "<password>")',
        f'{DEF}return connect_db("db", "ada", None)',
        # a call of something the snippet does not define
        'return connect("db", "ada", "localhost")',
        # zip with names that are not written out, or that hold no credential
        "return dict(zip(names, values))",
        'return dict(zip(["user", "host"], ["ada", "db"]))',
        'return dict(zip(["password"], []))',
    ],
)
def test_positions_that_hold_no_credential_are_unchanged(code: str) -> None:
    stored, parameters = lifted(code)
    assert stored == code
    assert parameters == []


@pytest.mark.parametrize(
    "code",
    [
        # a name defined twice: a credential by position in either is one
        f'def f(a, b):\n    return a\ndef f(a, password):\n    return a\nreturn f("x", "{SECRET}")',
        # namedtuple specs of odd shapes
        f'C = namedtuple("C", "password,,  user")\nreturn C("{SECRET}", "ada")',
        f'C = namedtuple("C", [1, None, "token"])\nreturn C(1, 2, "{SECRET}")',
        f'C = namedtuple("C", fields)\nreturn C(password="{SECRET}")',
        # zip names given twice: either may be the one zipped
        f'k = ["a", "b"]\nk = ["user", "password"]\nreturn dict(zip(k, ["ada", "{SECRET}"]))',
        # more arguments than parameters, a spread of an unknown name, a second spread
        f'{DEF}return connect_db("db", "ada", "{SECRET}", "extra", "more")',
        # after a spread of unknown length, any later argument may be the credential
        f'{DEF}return connect_db(*rest, "{SECRET}")',
        f'{DEF}return connect_db("db", *[*rest, "ada"], "{SECRET}")',
        f'{DEF}return connect_db("db", *[], *["ada", "{SECRET}"])',
        # unicode names and values
        f'def connecter(hôte, mot_de_passe):\n    return hôte\nreturn connecter("ü", "{SECRET}")',
        # injection-looking text as the value
        f"def f(user, password):\n    return user\n"
        f'return f("ada", "{SECRET}\\"); DROP TABLE t;--")',
    ],
)
def test_hostile_positions_are_judged_without_error(code: str) -> None:
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert find_secret(stored) is None
    assert parameters  # the credential became a parameter
    parse_snippet(stored)


def test_thousands_of_parameters_and_calls_are_each_judged() -> None:
    names = ", ".join(f"p{i}" for i in range(2_000))
    values = ", ".join(f'"v{i}"' for i in range(2_000))
    calls = "\n".join(f'f("x{i}", "{SECRET}c{i}")' for i in range(2_000))
    code = (
        f"def g({names}, password):\n    return 1\n"
        f"def f(a, token):\n    return a\n{calls}\n"
        f'return g({values}, "{SECRET}last")'
    )
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert '"v1999"' in stored
    assert '"x0"' in stored
    assert len(parameters) == 2_001  # each call's token, and the password
