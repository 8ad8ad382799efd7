"""A constant given to a plain name and used as a credential later is lifted like one written
in place (``x = "..."`` then ``password = x``, ``api_key=x``, ``f"Bearer {x}"`` under an
``Authorization`` key), through chains of names; names that never reach a credential keep
their constants."""

from __future__ import annotations

import ast

import pytest

from pml.analysis.bindings import CREDENTIAL_ALIAS
from pml.analysis.code_hash import normalized_code_hash
from pml.analysis.credential_flow import mark_credential_aliases
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import analyze_snippet

SECRET = "Zq8kLm2pXr5v"  # neither random-looking enough nor shaped like a token alone


def lifted(code: str) -> tuple[str, list[str]]:
    analysis = analyze_snippet(code)
    return analysis.lifted_code, sorted(p.name for p in analysis.parameters)


@pytest.mark.parametrize(
    ("code", "parameter"),
    [
        (f'x = "{SECRET}"\npassword = x\nreturn password', "password"),
        (f'x = "{SECRET}"\nreturn await mcp.db.query(sql="select 1", password=x)', "password"),
        (f'k = "{SECRET}"\nreturn await mcp.api.get(url="https://x", api_key=k)', "api_key"),
        (f'v = "{SECRET}"\nh = {{"Authorization": f"Bearer {{v}}"}}\nreturn h', "authorization"),
        (f'v = "{SECRET}"\nh = {{"Authorization": "Token " + v}}\nreturn h', "authorization"),
        (f'a = "{SECRET}"\nb = a\nc = b\nreturn {{"secret": c}}', "secret"),
        (f'user, v = "bob", "{SECRET}"\nreturn login(user=user, password=v)', "password"),
        (f'v: str = "{SECRET}"\nif password == v:\n    return 1\nreturn 0', "password"),
        (f'def f(v="{SECRET}"):\n    return {{"token": v}}\nreturn f()', "token"),
        (f'v = "{SECRET}"\nreturn await mcp.auth.login(creds=(user, v))', "creds"),
    ],
)
def test_a_constant_that_becomes_a_credential_is_lifted(code: str, parameter: str) -> None:
    stored, parameters = lifted(code)
    assert SECRET not in stored
    assert parameter in parameters
    assert find_secret(stored) is None


@pytest.mark.parametrize(
    "code",
    [
        'host = "db.internal"\nreturn await mcp.db.connect(host=host, password=args["pw"])',
        'user = "ada"\nreturn login(user=user, password=pw)',
        'x = "hello"\ny = x\nreturn {"greeting": y}',
        'path = "/tmp/report.csv"\nreturn await mcp.fs.read_text_file(path=path)',
        'token = args["token"]\nreturn {"Authorization": f"Bearer {token}"}',
        'n = "10"\nreturn {"password_min_length": int(n)}',
    ],
)
def test_names_that_never_reach_a_credential_keep_their_constants(code: str) -> None:
    stored, _ = lifted(code)
    assert stored == code


def test_marking_keeps_the_code_hash_and_names_the_credential() -> None:
    code = f'x = "{SECRET}"\nb = x\npassword = b\nreturn password'
    tree = ast.parse(code)
    mark_credential_aliases(tree)
    marked = {
        n.id: getattr(n, CREDENTIAL_ALIAS, None)
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    assert marked == {"x": "password", "b": "password", "password": None}
    assert normalized_code_hash(code) == analyze_snippet(code).code_hash


def test_a_long_chain_of_copies_is_followed_to_its_end() -> None:
    chain = "\n".join(f"v{i + 1} = v{i}" for i in range(3_000))
    stored, parameters = lifted(f'v0 = "{SECRET}"\n{chain}\npassword = v3000\nreturn password')
    assert SECRET not in stored
    assert parameters == ["password"]


def test_unicode_names_are_followed_as_python_reads_them() -> None:
    stored, _ = lifted(f'ß = "{SECRET}"\n𝔳𝔞𝔩 = ß\nreturn {{"password": 𝔳𝔞𝔩}}')
    assert SECRET not in stored
