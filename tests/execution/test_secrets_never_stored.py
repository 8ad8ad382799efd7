"""Secrets are never stored (SPEC §6.1), through a real SDK client, sandbox and SQLite file.

A snippet holding credentials in a docstring, a comment, f-string text, a bytes literal,
glued constants and a dict key runs as written; what the registry keeps (records, versions,
traces, and every other table of the database file) holds none of them, and the capability,
called again by name with the secrets as arguments, gives the same result.
"""

from __future__ import annotations

import pytest

from execution.clientrouting import READ_NOTE, open_hub, trace
from execution.conftest import SCOPE, Execute
from gateway.upstreams import Upstream
from pml.analysis.code_hash import parse_snippet
from samples import database_text

pytestmark = pytest.mark.anyio

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
SK = "sk-proj-Q8zT1lmX4vR7yN2kP9sJ3wB6"
AKIA = "AKIAIOSFODNN7EXAMPLE"
SECRETS = (GHP, SK, AKIA, GHP[4:], SK[8:])

CODE = f'''"""Post a status with the deploy token {GHP}."""
# the key is {SK} (rotate monthly)
header = f"Bearer {SK}"
raw = b"{AKIA}"
glued = "ghp_" + "{GHP[4:]}"
keys = {{"{AKIA}": "aws"}}
r = await mcp.a.echo(text=header, raw=raw.decode(), glued=glued, keys=keys, n=args["n"])
return r["args"]
'''
EXPECTED = {"text": f"Bearer {SK}", "raw": AKIA, "glued": GHP, "keys": {AKIA: "aws"}, "n": 1}

SECOND = f"""# v2 reads the token from {GHP} no more
token = "{SK[:8]}" "{SK[8:]}"
r = await mcp.a.echo(text=f"token={{token}}", n=args["n"])
return r["args"]
"""


async def test_stored_code_versions_and_database_hold_no_secret_and_the_capability_runs(
    execute: Execute, upstreams: dict[str, Upstream], sqlite_url: str
) -> None:
    created = await execute(code=CODE, args={"n": 1}, name="ops:post", intent="post a status")
    assert created["status"] == "success", created
    assert created["result"] == EXPECTED  # the snippet ran as written, secrets and all
    assert upstreams["a"].calls[-1][1] == EXPECTED

    record = await execute.record("ops:post")
    stored = record.code or ""
    parse_snippet(stored)
    for secret in SECRETS:
        assert secret not in stored
    assert "[REDACTED]" in stored
    schema = record.parameters_schema
    assert set(schema["required"]) == {"n", "header", "raw", "glued"}
    for name in ("header", "raw", "glued"):
        assert "default" not in schema["properties"][name]

    again = await execute(
        capability="ops:post", args={"n": 1, "header": SK, "raw": AKIA, "glued": GHP}
    )
    assert again["status"] == "success", again
    assert again["result"] == EXPECTED
    assert again["created"] is False

    missing = await execute.error(capability="ops:post", args={"n": 1})
    assert missing["code"] == "INVALID_ARGS"

    updated = await execute(code=SECOND, args={"n": 2}, name="ops:post", update=True)
    assert updated["status"] == "success", updated
    assert updated["result"] == {"text": f"token={SK}", "n": 2}
    _, versions, _ = await execute.gateway.registry.history(SCOPE, "ops:post")
    assert len(versions) == 2
    for version in versions:
        for secret in SECRETS:
            assert secret not in (version.code or "")
    newest = await execute(capability="ops:post", args={"n": 3, "token": SK})
    assert newest["result"] == {"text": f"token={SK}", "n": 3}

    await execute.gateway.executor.flush()
    everything = database_text(sqlite_url)
    assert "ops:post" in everything  # the dump does read the registry
    for secret in SECRETS:
        assert secret not in everything


async def test_code_whose_secret_cannot_move_is_refused_before_it_runs(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = f'match args["kind"]:\n    case "{GHP}":\n        await mcp.a.echo(text="x")\nreturn 1\n'
    error = await execute.error(code=code, args={"kind": "y"})
    assert error["code"] == "INVALID_INPUT"
    assert error["message"] == (
        "a secret-looking text in a match pattern cannot be moved out of the code: "
        "pass it in args instead (line 2)"
    )
    assert GHP not in str(error)
    assert upstreams["a"].calls == []
    assert await execute.stored() == {"records": 0, "versions": 0, "traces": 0}


# -- traces from PML clients go through the same capture ------------------------------------

OFFLINE = f"""# read with {GHP}
header = f"token {SK}"
note = await mcp.filesystem.read_text_file(path="/notes/a.txt", auth=header)
return note
"""


async def test_client_traces_store_no_secret_and_an_unmovable_one_is_rejected(
    sqlite_url: str,
) -> None:
    async with open_hub(sqlite_url, routing={"local": ["filesystem"]}) as hub:
        handed = await hub.hand_off(OFFLINE)
        [handed_off] = await hub.ingest([trace(handed["workflowId"])])
        offline = trace("wf_secret_offline", offline={"code": OFFLINE + "\n", "intent": "x"})
        [learned] = await hub.ingest([offline])
        unmovable = f'match args["k"]:\n    case "{GHP}":\n        pass\n' + READ_NOTE
        refused = trace("wf_secret_refused", offline={"code": unmovable, "intent": "x"})
        [rejected] = await hub.ingest([refused])
        assert handed_off["status"] == learned["status"] == "captured"
        for result in (handed_off, learned):
            code = (await hub.record(result["capabilityFqdn"])).code or ""
            assert "# read with [REDACTED]" in code
            assert "f\"token {args['header']}\"" in code
            for secret in SECRETS:
                assert secret not in code
        assert rejected["status"] == "rejected"
        assert rejected["message"] == (
            "a secret-looking text in a match pattern cannot be moved out of the code: "
            "pass it in args instead (line 2)"
        )
        await hub.gateway.executor.flush()
    everything = database_text(sqlite_url)
    assert "wf_secret_offline" in everything
    for secret in SECRETS:
        assert secret not in everything
