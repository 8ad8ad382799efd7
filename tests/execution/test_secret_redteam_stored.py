"""Credential forms a red team got stored are no longer stored (SPEC §6.1), through a real SDK
client, sandbox and SQLite file: credential files' own formats in strings, comments and
intents, webhook URLs, a ``pw`` name, a JSON ``"pass"`` key, credentials bound to their name
by position, and a ``sqlcmd -P`` command line. Each snippet runs as written; the database
file and the audit file beside it hold no secret, and the capability runs again by name
with the secrets as arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execution.conftest import Execute
from samples import database_text

pytestmark = pytest.mark.anyio

PGPASS = "Pgpass2025Pw"
NETRC = "correcthorsebattery"  # no digit: only the .netrc format says it is a password
ORACLE = "Tiger2025Pw"
HEADER = "Header2025Pw"
SETATTR = "Attr2025Pw"
LOGIN = "Login2025Pw"
PW = "Short2025Pw"
JSON_PASS = "Json2025Pw"
SQLCMD = "Sqlcmd2025Pw"
SLACK = "hooks.slack.com/services/T0A1B2C3D/B0E1F2G3H/AbCdEf0123456789ghIJ"
INTENT = "Intent2025Pw"
SECRETS = (PGPASS, NETRC, ORACLE, HEADER, SETATTR, LOGIN, PW, JSON_PASS, SQLCMD, SLACK, INTENT)

CODE = f'''"""Reads db.example.com:5432:app:ada:{PGPASS} from the team's notes."""
# machine api.example.com login ada password {NETRC}
dsn = "ada/{ORACLE}@db.example.com:1521/ORCL"
headers = [("Accept", "json"), ("X-Api-Key", "{HEADER}")]
class Conn:
    def login(self, user, password):
        return len(password)
c = Conn()
setattr(c, "password", "{SETATTR}")
n = c.login("ada@example.com", password="{LOGIN}")
pw = "{PW}"
config = '{{"user": "ada", "pass": "{JSON_PASS}"}}'
cmd = "sqlcmd -S db -U sa -P {SQLCMD}"
hook = "https://{SLACK}"
r = await mcp.a.echo(text=dsn, n=n + len(pw) + len(config) + len(cmd) + len(hook))
return [r["args"], headers[1][1], c.password]
'''


def stored_text(sqlite_url: str) -> str:
    """Every stored value of the database file, and every audit file beside it."""
    folder = Path(sqlite_url.removeprefix("sqlite:///")).parent
    audit = "".join(path.read_text(errors="replace") for path in folder.glob("*.jsonl"))
    return database_text(sqlite_url) + audit


async def test_red_team_forms_run_as_written_and_never_reach_the_database(
    execute: Execute, sqlite_url: str
) -> None:
    created = await execute(
        code=CODE,
        name="ops:redteam",
        intent=f"sync with db.internal:6432:app:ada:{INTENT}",
    )
    assert created["status"] == "success", created
    args, header, attribute = created["result"]
    assert (args["text"], header, attribute) == (
        f"ada/{ORACLE}@db.example.com:1521/ORCL",
        HEADER,
        SETATTR,
    )
    record = await execute.record("ops:redteam")
    code = record.code or ""
    for secret in SECRETS:
        assert secret not in code
    required = set(record.parameters_schema["required"])
    assert {"x_api_key", "password", "pw", "config", "cmd", "hook"} <= required
    assert "dsn" in required
    again = await execute(
        capability="ops:redteam",
        args={
            "dsn": f"ada/{ORACLE}@db.example.com:1521/ORCL",
            "x_api_key": HEADER,
            "password": LOGIN,
            "password_2": SETATTR,
            "pw": PW,
            "config": f'{{"user": "ada", "pass": "{JSON_PASS}"}}',
            "cmd": f"sqlcmd -S db -U sa -P {SQLCMD}",
            "hook": f"https://{SLACK}",
        },
    )
    assert again["status"] == "success", again
    assert again["result"] == created["result"]
    everything = stored_text(sqlite_url)
    assert "ops:redteam" in everything
    for secret in SECRETS:
        assert secret not in everything


@pytest.mark.parametrize(
    "intent",
    [
        f"connect with db:5432:app:ada:{INTENT}",
        f"use machine h login ada password {NETRC}",
        f"log in as ada, pw {INTENT}",
        f'config is {{"pass": "{INTENT}"}}',
    ],
)
async def test_credential_forms_in_an_intent_are_redacted(
    execute: Execute, sqlite_url: str, intent: str
) -> None:
    created = await execute(code="return 1", name="ops:intent", intent=intent)
    assert created["status"] == "success", created
    everything = stored_text(sqlite_url)
    assert "ops:intent" in everything
    assert INTENT not in everything
    assert NETRC not in everything


async def test_a_description_with_a_pgpass_line_is_redacted(
    execute: Execute, sqlite_url: str
) -> None:
    created = await execute(code="return 1", name="ops:desc", intent="return one")
    assert created["status"] == "success"
    renamed = await execute.client.call_tool(
        "cap_rename", {"name": "ops:desc", "description": f"reads db:5432:app:ada:{PGPASS}"}
    )
    assert not renamed.is_error
    assert (await execute.record("ops:desc")).description == "reads db:5432:app:ada:[REDACTED]"
    assert PGPASS not in stored_text(sqlite_url)
