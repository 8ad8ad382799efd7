"""Secrets that reach a tool through a container, a loop, a transform, a function of the
snippet or a name in another language are never stored, through the real sandbox and a
SQLite file; the capability, called again with them as arguments, gives the same result."""

from __future__ import annotations

import pytest

from execution.conftest import Execute
from gateway.upstreams import Upstream
from samples import database_text

pytestmark = pytest.mark.anyio

PASSWORD = "Zq8kLm2pXr5v"  # not random-looking enough to be caught by its look alone
TOKEN = "Hv3nQ7wT1xKc"
KEY = "Rb5mN2sW8yLp"

CODE = f'''vals = ["ada", "{PASSWORD}"]
user, password = vals
cfg = {{"db": {{"keys": ["{TOKEN}"]}}}}
def secret_key():
    return "  {KEY}  ".strip()
for mot_de_passe in ["{PASSWORD}"]:
    r = await mcp.a.echo(user=user, password=password, token=cfg["db"]["keys"][0],
                         key=secret_key(), pw=mot_de_passe, n=args["n"])
return r["args"]
'''
EXPECTED = {"user": "ada", "password": PASSWORD, "token": TOKEN, "key": KEY, "pw": PASSWORD}


async def test_secrets_through_flows_are_lifted_and_the_capability_runs_with_them(
    execute: Execute, upstreams: dict[str, Upstream], sqlite_url: str
) -> None:
    created = await execute(code=CODE, args={"n": 1}, name="ops:login", intent="log in")
    assert created["status"] == "success", created
    assert created["result"] == {**EXPECTED, "n": 1}

    record = await execute.record("ops:login")
    stored = record.code or ""
    for secret in (PASSWORD, TOKEN, KEY):
        assert secret not in stored
    assert '"ada"' in stored  # the element that never becomes a credential stays
    assert set(record.parameters_schema["required"]) == {
        "n",
        "password",
        "token",
        "secret_key",
        "pw",
    }

    arguments = {"n": 2, "password": PASSWORD, "token": TOKEN, "secret_key": KEY, "pw": PASSWORD}
    again = await execute(capability="ops:login", args=arguments)
    assert again["status"] == "success", again
    assert again["result"] == {**EXPECTED, "n": 2}
    assert upstreams["a"].calls[-1][1] == {**EXPECTED, "n": 2}

    await execute.gateway.executor.flush()
    everything = database_text(sqlite_url)
    assert "ops:login" in everything
    for secret in (PASSWORD, TOKEN, KEY):
        assert secret not in everything


POSITIONAL_CODE = f'''def call(user, password, n):
    return mcp.a.echo(user=user, password=password, n=n)
names = ["user", "token"]
cfg = dict(zip(names, ["ada", "{TOKEN}"]))
r = await call("ada", "{PASSWORD}", args["n"])
return [r["args"], cfg["token"] == "{TOKEN}"]
'''


async def test_secrets_given_by_position_are_lifted_and_the_capability_runs_with_them(
    execute: Execute, upstreams: dict[str, Upstream], sqlite_url: str
) -> None:
    created = await execute(code=POSITIONAL_CODE, args={"n": 1}, name="ops:connect", intent="x")
    assert created["status"] == "success", created
    assert created["result"] == [{"user": "ada", "password": PASSWORD, "n": 1}, True]

    record = await execute.record("ops:connect")
    stored = record.code or ""
    assert PASSWORD not in stored
    assert TOKEN not in stored
    assert set(record.parameters_schema["required"]) == {"n", "password", "token"}

    again = await execute(
        capability="ops:connect", args={"n": 2, "password": PASSWORD, "token": TOKEN}
    )
    assert again["status"] == "success", again
    assert again["result"] == [{"user": "ada", "password": PASSWORD, "n": 2}, True]
    assert upstreams["a"].calls[-1][1] == {"user": "ada", "password": PASSWORD, "n": 2}

    await execute.gateway.executor.flush()
    everything = database_text(sqlite_url)
    assert "ops:connect" in everything
    assert PASSWORD not in everything
    assert TOKEN not in everything
