"""Secrets in the less common places are never stored either (SPEC §6.1), through a real SDK
client, sandbox and SQLite file: token formats beyond the usual few, command lines, prose,
passphrases, credentials glued at run time, numbers under credential names, names,
descriptions and tags. What is refused changes nothing; what is stored holds no secret.
"""

from __future__ import annotations

import pytest

from execution.conftest import Execute
from gateway.upstreams import Upstream
from samples import database_text

pytestmark = pytest.mark.anyio

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
HF = "hf_" + "ujzPdeIgxLdGncfBAepfJBdKhoOOLdKLzd"
SHOPIFY = "shpat_" + "16947ccf25ec84d8dbc74254770f5890"
PASSWORD = "Summer2025x"
PASSPHRASE = "correct horse battery staple"
PIN = "83749203"

MOVABLE = f'''"""Sync the models with {HF}; the db password is {PASSWORD}."""
# passphrase: {PASSPHRASE}
# shop token {SHOPIFY}
env = {{"PGPASSWORD": "{PIN}"}}
cmd = "mysql -h db -uroot -p{PASSWORD} app"
r = await mcp.a.echo(text=cmd, env=env, n=args["n"])
return r["args"]
'''
SECRETS = (HF, SHOPIFY, PASSWORD, PASSPHRASE, PIN)


async def test_new_token_formats_command_lines_and_prose_never_reach_the_database(
    execute: Execute, sqlite_url: str
) -> None:
    created = await execute(code=MOVABLE, args={"n": 1}, name="ops:sync", intent="sync models")
    assert created["status"] == "success", created
    assert created["result"]["text"] == f"mysql -h db -uroot -p{PASSWORD} app"  # ran as written
    record = await execute.record("ops:sync")
    assert record.code == (
        '"""Sync the models with [REDACTED]; the db password is [REDACTED]."""\n'
        "# passphrase: [REDACTED]\n"
        "# shop token [REDACTED]\n"
        'env = {"PGPASSWORD": args["pgpassword"]}\n'
        'cmd = args["cmd"]\n'
        'r = await mcp.a.echo(text=cmd, env=env, n=args["n"])\n'
        'return r["args"]\n'
    )
    assert set(record.parameters_schema["required"]) == {"cmd", "n", "pgpassword"}
    lifted = {"cmd": f"mysql -h db -uroot -p{PASSWORD} app", "pgpassword": PIN}
    again = await execute(capability="ops:sync", args={"n": 2, **lifted})
    assert again["status"] == "success", again
    assert again["result"] == {**created["result"], "n": 2}
    everything = database_text(sqlite_url)
    assert "ops:sync" in everything
    for secret in SECRETS:
        assert secret not in everything


@pytest.mark.parametrize(
    ("code", "what"),
    [
        (f't = "ghp_%.36s" % "{GHP[4:]}"\nreturn t[:4]', "a credential glued together"),
        (f't = "ghp_" + "{GHP[4:]}".replace("-", "")\nreturn 1', "a credential glued together"),
        (f'P = "ghp_"\nR = "{GHP[4:]}"\nreturn len(P + R)', "a credential glued together"),
        ("password = 83749203\nreturn 1", "a number under a credential name"),
        (f"t = ''.join(map(chr, {[ord(c) for c in GHP]}))\nreturn 1", "character codes"),
        (f"t = bytes({[ord(c) for c in GHP]}).decode()\nreturn 1", "character codes"),
        (
            f"class C:\n    __match_args__ = ()\nmatch C():\n    case C({GHP}=1):\n"
            "        r = 1\n    case _:\n        r = 2\nreturn r",
            "a name",
        ),
    ],
)
async def test_code_that_glues_or_hides_a_credential_is_refused_before_it_runs(
    execute: Execute, upstreams: dict[str, Upstream], code: str, what: str
) -> None:
    error = await execute.error(code=code)
    assert error["code"] == "INVALID_INPUT"
    assert what in error["message"]
    assert GHP[4:] not in str(error)
    assert "83749203" not in str(error)
    assert await execute.stored() == {"records": 0, "versions": 0, "traces": 0}


async def test_a_name_that_looks_like_a_secret_is_refused_and_nothing_runs_or_is_stored(
    execute: Execute, upstreams: dict[str, Upstream], sqlite_url: str
) -> None:
    code = 'r = await mcp.a.echo(text="hi")\nreturn r["args"]'
    for name in (GHP, f"ops:{HF}"):
        error = await execute.error(code=code, name=name)
        assert error["code"] == "INVALID_NAME"
        assert "looks like a secret" in error["message"]
        assert GHP not in str(error)
        assert HF not in str(error)
    assert upstreams["a"].calls == []
    assert await execute.stored() == {"records": 0, "versions": 0, "traces": 0}
    assert GHP not in database_text(sqlite_url)


async def test_descriptions_are_redacted_and_secret_tags_refused(
    execute: Execute, sqlite_url: str
) -> None:
    created = await execute(code="return 1", name="ops:one", intent="return one")
    assert created["status"] == "success"
    renamed = await execute.client.call_tool(
        "cap_rename", {"name": "ops:one", "description": f"calls the API with {SHOPIFY}"}
    )
    assert not renamed.is_error
    assert (await execute.record("ops:one")).description == "calls the API with [REDACTED]"
    tagged = await execute.client.call_tool("cap_tag", {"name": "ops:one", "tags": [GHP]})
    assert tagged.is_error
    assert GHP not in str(tagged.content)
    assert (await execute.record("ops:one")).tags == []
    everything = database_text(sqlite_url)
    assert SHOPIFY not in everything
    assert GHP not in everything


@pytest.mark.parametrize(
    "code",
    [
        f'd = {{}}\nd["password"] = "{PASSWORD}"\nreturn d["password"][:3]',
        f'class C:\n    pass\nc = C()\nc.password = "{PASSWORD}"\nreturn c.password[:3]',
        f'def connect(host, password="{PASSWORD}"):\n    return password[:3]\nreturn connect("h")',
        (
            f'def check(password):\n    return password == "{PASSWORD}"\n'
            'return "Sum" if check("x") is False else "no"'
        ),
        f'password = ""\npassword += "{PASSWORD}"\nreturn password[:3]',
    ],
    ids=["subscript", "attribute", "default", "compare", "augmented"],
)
async def test_a_credential_bound_by_subscript_attribute_default_or_comparison_is_lifted(
    execute: Execute, sqlite_url: str, code: str
) -> None:
    created = await execute(code=code, name="ops:bound", intent="use a password")
    assert created["status"] == "success", created
    assert created["result"] == "Sum"
    record = await execute.record("ops:bound")
    assert PASSWORD not in (record.code or "")
    arguments = {"password": PASSWORD}
    if "check(" in code:  # "x" is given by position to the password parameter: lifted too
        arguments["password_2"] = "x"
    assert record.parameters_schema["required"] == list(arguments)
    again = await execute(capability="ops:bound", args=arguments)
    assert again["status"] == "success", again
    assert again["result"] == "Sum"
    assert PASSWORD not in database_text(sqlite_url)
