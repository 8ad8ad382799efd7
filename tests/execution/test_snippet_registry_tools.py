"""PML's read-only registry tools called from snippets (``mcp.pml.cap_list(...)``, SPEC §14):
the same answers, errors, scope and policy as the MCP tools, and nothing that writes."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from e2e.support import Upstream as RealServer
from e2e.support import pml_stdio, python_server, result_json, write_config
from execution.clientrouting import FS, READ_NOTE, Hub, open_hub
from execution.conftest import SCOPE, Execute
from gateway.upstreams import Upstream
from pml.analysis.snippet import analyze_snippet
from pml.client.runner import LocalRunner
from pml.errors import PmlError, UnknownTool
from pml.execution.references import plan_references
from pml.gateway.schemas import ExecuteParams
from pml.registry.scope import Scope
from pml.sandbox.monty import MontyEngine
from pml.storage.tables import audit_events

pytestmark = pytest.mark.anyio

OTHER = Scope("globex", "site", "mallory")
READ = 'r = await mcp.a.echo(text="a.json")\nreturn r["args"]["text"]'
CATCH = """
try:
    return await mcp.pml.{call}
except ToolError as error:
    return {{"caught": str(error)}}
"""


async def _direct(execute: Execute, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the MCP tool itself answers (its JSON, an error's ``{"error": ...}`` included)."""
    result = await execute.client.call_tool(tool, arguments)
    assert result.structured_content is not None
    return result.structured_content


async def test_cap_list_answers_in_the_snippet_what_the_tool_answers(execute: Execute) -> None:
    await execute(code=READ, name="fs:read_json", intent="read a json file")
    direct = await _direct(execute, "cap_list", {"pattern": "fs:*"})
    answer = await execute(code='return await mcp.pml.cap_list(pattern="fs:*")')
    assert answer["status"] == "success"
    assert answer["result"] == direct
    assert [item["display_name"] for item in answer["result"]["items"]] == ["fs:read_json"]
    assert answer["toolsUsed"] == ["pml:cap_list"]
    assert answer["routing"] == "cloud"  # PML's own tools never make code local
    record = await execute.record(answer["capabilityFqdn"])
    assert record.tools_used == ["pml:cap_list"]
    assert record.routing == "cloud"


async def test_lookup_whois_history_and_discover_answer_like_the_tools(execute: Execute) -> None:
    created = await execute(code=READ, name="fs:read_json", intent="read a json file")
    fqdn = created["capabilityFqdn"]
    code = f"""
lookup = await mcp.pml.cap_lookup(name="fs:read_json")
whois = await mcp.pml.cap_whois(fqdn="{fqdn}")
history = await mcp.pml.cap_history(name="fs:read_json")
found = await mcp.pml.pml_discover(intent="read a json file", kind="capability")
return {{"lookup": lookup, "whois": whois, "history": history, "found": found}}
"""
    await execute.gateway.executor.flush()
    lookup = await _direct(execute, "cap_lookup", {"name": "fs:read_json"})
    history = await _direct(execute, "cap_history", {"name": "fs:read_json"})
    whois = await _direct(execute, "cap_whois", {"fqdn": fqdn})
    answer = await execute(code=code, intent="describe a capability")
    result = answer["result"]
    assert result["lookup"] == lookup
    assert result["history"] == history
    assert result["whois"]["fqdn"] == whois["fqdn"] == fqdn
    assert result["whois"]["code"] == whois["code"]
    assert result["whois"]["aliases"] == whois["aliases"]
    assert [hit["name"] for hit in result["found"]["results"]][:1] == ["fs:read_json"]
    assert answer["toolsUsed"] == [
        "pml:cap_lookup",
        "pml:cap_whois",
        "pml:cap_history",
        "pml:pml_discover",
    ]


async def test_a_tool_error_is_a_catchable_tool_error_with_the_tool_s_message(
    execute: Execute,
) -> None:
    caught = await execute(code=CATCH.format(call='cap_lookup(name="nope:missing")'))
    assert caught["result"] == {"caught": "Capability not found: nope:missing"}
    uncaught = await execute.error(code='return await mcp.pml.cap_lookup(name="nope:missing")')
    assert uncaught["code"] == "TOOL_ERROR"
    assert "pml:cap_lookup" in uncaught["message"]
    assert "Capability not found: nope:missing" in uncaught["message"]
    assert (await execute.stored())["records"] == 1  # only the run that caught it


HOSTILE_CALLS = {
    "name-not-a-string": ("cap_lookup", {"name": 123}),
    "name-null": ("cap_lookup", {"name": None}),
    "name-a-list": ("cap_lookup", {"name": ["fs:read_json"]}),
    "name-empty": ("cap_lookup", {"name": ""}),
    "name-huge": ("cap_lookup", {"name": "x" * 200_000}),
    "unknown-keyword": ("cap_lookup", {"name": "fs:read_json", "as_admin": True}),
    "sql-injection-name": ("cap_lookup", {"name": "fs:read_json' OR '1'='1"}),
    "sql-injection-pattern": ("cap_list", {"pattern": "%'; DROP TABLE capability_records;--"}),
    "nul-in-pattern": ("cap_list", {"pattern": "fs:\x00*"}),
    "limit-too-big": ("cap_list", {"limit": 1_000_000}),
    "limit-a-string": ("cap_list", {"limit": "5"}),
    "both-filters": ("cap_list", {"named_only": True, "unnamed_only": True}),
    "bad-fqdn": ("cap_whois", {"fqdn": "../../etc/passwd"}),
    "unicode-fqdn": ("cap_whois", {"fqdn": "acme.webapp.fs.rëad_json.ab12"}),
    "bidi-name": ("cap_history", {"name": "fs:read\u202ejson"}),
    "version-spec-in-history": ("cap_history", {"name": "fs:read_json@v1"}),
    "blank-intent": ("pml_discover", {"intent": "   "}),
    "discover-limit": ("pml_discover", {"intent": "read", "limit": 51}),
}


@pytest.mark.parametrize(
    ("tool", "arguments"), list(HOSTILE_CALLS.values()), ids=list(HOSTILE_CALLS)
)
async def test_hostile_arguments_get_the_tool_s_own_answer_inside_the_snippet(
    execute: Execute, tool: str, arguments: dict[str, Any]
) -> None:
    await execute(code=READ, name="fs:read_json")
    direct = await _direct(execute, tool, arguments)
    code = f"""
try:
    return {{"answer": await mcp.pml.{tool}(**args["call"])}}
except ToolError as error:
    return {{"error": str(error)}}
"""
    answer = await execute(code=code, args={"call": arguments})
    if "error" in direct:
        assert direct["error"]["code"] in ("INVALID_INPUT", "NOT_FOUND"), direct
        assert answer["result"] == {"error": direct["error"]["message"]}
        assert len(answer["result"]["error"]) < 5_000  # a huge argument, not a huge message
    else:  # e.g. an injection attempt is just a pattern that matches nothing
        assert answer["result"] == {"answer": direct}
    listed = await execute(code="return await mcp.pml.cap_list(named_only=True)")
    assert [item["display_name"] for item in listed["result"]["items"]] == ["fs:read_json"]


WRITING = {
    "cap_rename": 'await mcp.pml.cap_rename(name="fs:read_json", new_name="stolen")',
    "cap_curate": 'await mcp.pml.cap_curate(mode="auto")',
    "pml_execute": 'await mcp.pml.pml_execute(intent="x", code="return 1")',
    "camel-case": 'await mcp.pml.capRename(name="fs:read_json", new_name="stolen")',
    "seed-spelling": 'await mcp.pml["cap:rename"](name="fs:read_json", new_name="stolen")',
    "unknown": "await mcp.pml.drop_everything()",
}


@pytest.mark.parametrize("call", list(WRITING.values()), ids=list(WRITING))
async def test_writing_tools_are_unknown_before_anything_runs(
    execute: Execute, upstreams: dict[str, Upstream], call: str
) -> None:
    await execute(code=READ, name="fs:read_json")
    calls = len(upstreams["a"].calls)
    error = await execute.error(code=f'await mcp.a.echo(text="first")\n{call}\nreturn 1')
    assert error["code"] == "UNKNOWN_TOOL"
    assert "only PML's read-only tools can be called from snippets" in error["message"]
    for tool in ("cap_list", "cap_lookup", "cap_whois", "cap_history", "pml_discover"):
        assert f"mcp.pml.{tool}" in error["message"]
    assert len(upstreams["a"].calls) == calls  # nothing ran
    assert (await execute.record("fs:read_json")).display_name == "fs:read_json"


@pytest.mark.parametrize(
    "code",
    [
        'f = getattr(mcp.pml, "cap_rename")\nreturn await f(name="fs:read_json", new_name="x")',
        'return await mcp.pml["cap_" + "rename"](name="fs:read_json", new_name="x")',
        'm = mcp\nreturn await m.pml.cap_rename(name="fs:read_json", new_name="x")',
    ],
    ids=["getattr", "computed-name", "rebound-mcp"],
)
async def test_a_writing_tool_cannot_be_reached_by_a_detour(execute: Execute, code: str) -> None:
    await execute(code=READ, name="fs:read_json")
    answer = await execute(code=code)
    assert answer["status"] == "error"
    assert (await execute.record("fs:read_json")).display_name == "fs:read_json"


async def test_another_tenant_s_capability_is_invisible_to_the_registry_tools(
    execute: Execute,
) -> None:
    mine = await execute(code="return 'mine'", name="private:thing")
    fqdn = mine["capabilityFqdn"]
    code = f"""
found = []
for name in ["private:thing", "{fqdn}", "mcp__private__thing"]:
    try:
        found.append(await mcp.pml.cap_lookup(name=name))
    except ToolError as error:
        found.append(str(error))
try:
    found.append(await mcp.pml.cap_whois(fqdn="{fqdn}"))
except ToolError as error:
    found.append(str(error))
listed = await mcp.pml.cap_list(limit=500)
found.append([item["fqdn"] for item in listed["items"]])
return found
"""
    service = execute.gateway.executor
    theirs = await service.execute(OTHER, ExecuteParams(intent="look around", code=code))
    assert theirs["result"] == [
        "Capability not found: private:thing",
        f"Capability not found: {fqdn}",
        "Capability not found: mcp__private__thing",
        f"Capability not found: {fqdn}",
        [],
    ]
    # the caller's own scope sees it through the same snippet
    own = await service.execute(SCOPE, ExecuteParams(intent="look around", code=code))
    assert own["result"][0]["fqdn"] == fqdn


async def test_a_capability_that_uses_registry_tools_runs_by_name_and_nested(
    execute: Execute,
) -> None:
    await execute(code=READ, name="fs:read_json")
    await execute(
        code='return (await mcp.pml.cap_lookup(name=args["name"]))["display_name"]',
        name="meta:who",
        args={"name": "fs:read_json"},
    )
    by_name = await execute(capability="meta:who", args={"name": "meta:who"})
    nested = await execute(code='return await mcp.meta.who(name="fs:read_json")')
    assert by_name["result"] == "meta:who"
    assert nested["result"] == "fs:read_json"


@pytest.fixture
async def hub(sqlite_url: str) -> AsyncGenerator[Hub]:
    """``b`` is a cloud server, ``filesystem`` runs on PML clients' machines; ``pml:cap_whois``
    is denied by a permission rule."""
    routing = {"cloud": ["b"], "local": ["filesystem"]}
    permissions = {"allow": ["*:*"], "deny": ["pml:cap_whois"]}
    async with open_hub(sqlite_url, routing=routing, permissions=permissions) as opened:
        yield opened


@pytest.mark.parametrize(
    ("code", "routing"),
    [
        ('await mcp.b.echo(text="x")\nreturn await mcp.pml.cap_list()', "cloud"),
        ('await mcp.a.echo(text="x")\nreturn await mcp.pml.cap_list()', "local"),
        ("return await mcp.pml.cap_list()", "cloud"),
    ],
    ids=["with-a-cloud-server", "with-a-local-server", "alone"],
)
async def test_pml_tools_leave_routing_to_the_other_tools(
    hub: Hub, code: str, routing: str
) -> None:
    is_error, answer = await hub.execute({"intent": "list", "code": code}, client=None)
    assert not is_error, answer
    assert answer["routing"] == routing
    assert (await hub.record(answer["capabilityFqdn"])).routing == routing


async def test_the_permission_rules_and_the_gate_apply_to_pml_tools(hub: Hub) -> None:
    is_error, denied = await hub.execute(
        {"intent": "who is it", "code": 'return await mcp.pml.cap_whois(fqdn="a.b.c.d.abcd")'},
        client=None,
    )
    assert is_error
    assert denied["error"]["code"] == "PERMISSION_DENIED"
    assert "pml:cap_whois" in denied["error"]["message"]
    is_error, chat = await hub.execute(
        {"intent": "/chat hello", "code": "return await mcp.pml.cap_list()"}, client=None
    )
    assert is_error
    assert chat["error"]["code"] == "POLICY_DENIED"
    is_error, allowed = await hub.execute(
        {"intent": "list my capabilities", "code": "return await mcp.pml.cap_list()"},
        client=None,
    )
    assert not is_error, allowed
    await hub.gateway.policy.audit.flush()
    query = sa.select(audit_events.c.event, audit_events.c.details).where(
        audit_events.c.event.in_(["PERMISSION_CHECK", "TOOL_CALL_START", "TOOL_CALL_END"])
    )
    async with hub.gateway.db.read() as conn:
        events = [(row.event, row.details.get("tool")) for row in await conn.execute(query)]
    for event in ("PERMISSION_CHECK", "TOOL_CALL_START", "TOOL_CALL_END"):
        assert (event, "pml:cap_list") in events


async def test_code_for_a_pml_client_cannot_mix_in_pml_tools(hub: Hub) -> None:
    mixed = READ_NOTE.replace("return note", "return [note, await mcp.pml.cap_list()]")
    error = await hub.refused({"intent": "read and list", "code": mixed}, client=FS)
    assert error["code"] == "INVALID_INPUT"
    assert "pml:cap_list" in error["message"]
    assert "separate snippets" in error["message"]


async def test_code_run_by_pml_connect_is_told_pml_tools_run_on_the_gateway(hub: Hub) -> None:
    gateway = hub.gateway
    code = "return await mcp.pml.cap_list()"
    with pytest.raises(UnknownTool) as planned:
        await plan_references(
            analyze_snippet(code).calls, scope=SCOPE, registry=gateway.registry, pool=gateway.pool
        )
    assert "run on the PML gateway" in planned.value.message
    engine = MontyEngine()
    try:
        runner = LocalRunner(
            pool=gateway.pool,
            engine=engine,
            registry=gateway.registry,
            limits=gateway.settings.sandbox,
            scope=SCOPE,
        )
        run = await runner.run({"workflowId": "wf_local_1", "code": code})
    finally:
        await engine.aclose()
    assert isinstance(run.error, PmlError)
    assert run.error.code == "UNKNOWN_TOOL"
    assert "run on the PML gateway" in run.error.message


async def test_through_a_real_stdio_gateway_a_snippet_reads_the_registry(tmp_path: Path) -> None:
    """``pml serve --stdio`` with the real ``mcp-server-time``, driven by the SDK client."""
    time_server = RealServer(
        "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
    )
    config = write_config(
        tmp_path / "pml.toml", [time_server], database_url=f"sqlite:///{tmp_path / 'pml.db'}"
    )
    code = """
now = await mcp.time.get_current_time(timezone="UTC")
server = await mcp.pml.cap_lookup(name="mcp:time")
try:
    await mcp.pml.cap_lookup(name="nope:missing")
except ToolError as error:
    missing = str(error)
return {"tz": now["timezone"], "server": server["display_name"], "missing": missing}
"""
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        answer = result_json(
            await gw.client.call_tool("pml_execute", {"intent": "what time", "code": code})
        )
        refused = result_json(
            await gw.client.call_tool(
                "pml_execute",
                {"intent": "rename", "code": 'return await mcp.pml.cap_rename(name="mcp:time")'},
            )
        )
    assert answer["status"] == "success", answer
    assert answer["result"] == {
        "tz": "UTC",
        "server": "mcp:time",
        "missing": "Capability not found: nope:missing",
    }
    assert answer["toolsUsed"] == ["time:get_current_time", "pml:cap_lookup"]
    assert refused["status"] == "error"
    assert refused["error"]["code"] == "UNKNOWN_TOOL"


async def test_a_capability_in_the_reserved_namespace_is_called_by_its_name(
    execute: Execute,
) -> None:
    await execute(code="return await mcp.pml.cap_list()", name="counter")
    # PML's own tools give no namespace of their own: the code one
    assert (await execute.record("counter")).tool_name == "mcp__code__counter"
    created = await execute(code="return await mcp.pml.cap_list(limit=1)", name="pml:lister")
    assert (await execute.record("pml:lister")).tool_name == "mcp__pml__lister"
    error = await execute.error(code="return await mcp.pml.lister()")
    assert error["code"] == "UNKNOWN_TOOL"
    assert 'the capability pml:lister is called as mcp["pml:lister"]' in error["message"]
    by_name = await execute(code='return (await mcp["pml:lister"]())["total"]')
    assert by_name["result"] >= 1
    assert by_name["toolsUsed"][0] == created["capabilityFqdn"]
