"""Values bound to credential names a level down are lifted: names unpacked from a tuple or
list, and a command's password written as an argument list. Ordinary lists stay as written."""

from __future__ import annotations

import pytest

from pml.analysis.credentials import flag_spans
from pml.analysis.snippet import analyze_snippet

PASSWORD = "Summer2025x"


def stored(code: str) -> tuple[str, list[str]]:
    """The first line as stored, and the parameters the snippet takes."""
    analysis = analyze_snippet(f"{code}\nreturn 1")
    return analysis.lifted_code.splitlines()[0], [p.name for p in analysis.parameters]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (f'user, password = "bob", "{PASSWORD}"', 'user, password = "bob", args["password"]'),
        (
            f'[user, password] = ["bob", "{PASSWORD}"]',
            '[user, password] = ["bob", args["password"]]',
        ),
        (f'(user, token) = ("bob", "{PASSWORD}")', '(user, token) = ("bob", args["token"])'),
        (
            f'cmd = ["sshpass", "-p", "{PASSWORD}", "ssh", "db"]',
            'cmd = ["sshpass", "-p", args["password"], "ssh", "db"]',
        ),
        (
            f'cmd = ["mysql", "-u", "root", "--password", "{PASSWORD}"]',
            'cmd = ["mysql", "-u", "root", "--password", args["password"]]',
        ),
        (
            f'cmd = ["mysql", "-uroot", "-p{PASSWORD}", "app"]',
            'cmd = ["mysql", "-uroot", args["password"], "app"]',
        ),
        (
            f'cmd = ("curl", "-u", "bob:{PASSWORD}", "https://x")',
            'cmd = ("curl", "-u", args["password"], "https://x")',
        ),
        (f'run(["tool", "--api-key={PASSWORD}0123456789"])', 'run(["tool", args["password"]])'),
    ],
)
def test_a_credential_bound_a_level_down_is_lifted(code: str, expected: str) -> None:
    line, parameters = stored(code)
    assert line == expected
    assert PASSWORD not in line
    assert parameters


@pytest.mark.parametrize(
    "code",
    [
        'a, b = "x", "y"',
        'host, port = "db", 5432',
        'user, password = "bob", pw_from_vault',
        'cmd = ["docker", "run", "-p", "8080:80", "img"]',
        'cmd = ["ssh", "-p", "2222", "host"]',
        'cmd = ["tool", "--password", pw_var]',
        'cmd = ["tool", "--password-file", "/run/secrets/pw"]',
        'cmd = ["tool", "--password", "$DB_PASSWORD"]',
        'cmd = ["ls", "-la", "/tmp", "--color=auto"]',
        'cmd = ["git", "log", "--format=%H", "-n", "5"]',
        'xs = ["-", "--", "-x", "ünï", "--🔑=x", ""]',
    ],
)
def test_ordinary_lists_and_unpacking_stay_as_written(code: str) -> None:
    line, parameters = stored(code)
    assert line == code
    assert parameters == []


def test_a_huge_argument_list_is_read_whole() -> None:
    elements = ", ".join(f'"-x{i}"' for i in range(50_000))
    code = f'cmd = ["tool", {elements}, "--password", "{PASSWORD}"]\nreturn 1'
    analysis = analyze_snippet(code, max_code_bytes=len(code) + 1)
    assert analysis.lifted_code.splitlines()[0].endswith('"--password", args["password"]]')
    assert [p.name for p in analysis.parameters] == ["password"]


@pytest.mark.parametrize(
    "text", ["deploy -x1 --token abcd1234efgh", "deploy -vv --password=abcd1234efgh now"]
)
def test_a_flag_before_a_credential_flag_does_not_take_it_as_its_value(text: str) -> None:
    assert [text[start:end] for start, end in flag_spans(text)] == ["abcd1234efgh"]
