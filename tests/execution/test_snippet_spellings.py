"""The spellings agents write: ``mcp.fs.readJson`` finds ``fs:read_json`` and
``mcp.files.readFile`` the tool ``read_file`` when that is unambiguous, and the answer names
the canonical spelling (``canonicalSpellings``); ambiguous ones stay ``UNKNOWN_TOOL``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from e2e.support import Upstream as RealServer
from e2e.support import pml_stdio, python_server, result_json, write_config
from execution.conftest import Execute
from gateway.upstreams import Upstream, tool
from pml.errors import PmlError
from pml.execution.spellings import capability_variants, fold, folded_matches
from pml.gateway.schemas import ExecuteParams
from pml.registry.scope import Scope

pytestmark = pytest.mark.anyio

OTHER = Scope("globex", "site", "mallory")
READ = 'r = await mcp.a.echo(text="a.json")\nreturn r["args"]["text"]'
READ_OTHER = 'r = await mcp.a.echo(text="other.json")\nreturn r["args"]["text"]'
FILE_TOOLS = ["read_file", "read_text_file", "get-sum", "list_directory"]


@pytest.fixture
def upstreams() -> dict[str, Upstream]:
    """``a`` (echo), ``files`` (snake_case and kebab-case tools) and ``twins`` (``read_file``
    and ``readFile``: a camelCase spelling of either is ambiguous)."""
    return {
        "a": Upstream("a"),
        "files": Upstream("files", [tool(name) for name in FILE_TOOLS]),
        "twins": Upstream("twins", [tool("read_file"), tool("readFile")]),
    }


async def test_a_camel_case_call_finds_the_named_capability_and_names_its_spelling(
    execute: Execute,
) -> None:
    created = await execute(code=READ, name="fs:read_json")
    answer = await execute(code='return await mcp.fs.readJson(text="b.json")')
    assert answer["status"] == "success"
    assert answer["result"] == "b.json"
    assert answer["toolsUsed"][0] == created["capabilityFqdn"]  # then what it called
    [notice] = answer["canonicalSpellings"]
    assert {key: notice[key] for key in ("written", "canonical", "target", "line")} == {
        "written": "mcp.fs.readJson",
        "canonical": "mcp.fs.read_json",
        "target": "fs:read_json",
        "line": 1,
    }
    assert "write mcp.fs.read_json" in notice["message"]
    learned = await execute.record(answer["capabilityFqdn"])
    fqdn = created["capabilityFqdn"]
    assert learned.code == f'return await mcp["{fqdn}"](text=args["text"])'  # stored by FQDN


async def test_the_canonical_spelling_gets_no_notice(execute: Execute) -> None:
    await execute(code=READ, name="fs:read_json")
    answer = await execute(code="return await mcp.fs.read_json()")
    assert answer["result"] == "a.json"
    assert "canonicalSpellings" not in answer


async def test_upstream_tools_are_found_under_their_camel_case_spelling(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    code = """
a = await mcp.files.readFile(path="/a")
b = await mcp.files.getSum(a=1)
c = await mcp.files.ReadTextFile(path="/c")
return [a["tool"], b["tool"], c["tool"]]
"""
    answer = await execute(code=code)
    assert answer["result"] == ["read_file", "get-sum", "read_text_file"]
    assert upstreams["files"].calls == [
        ("read_file", {"path": "/a"}),
        ("get-sum", {"a": 1}),
        ("read_text_file", {"path": "/c"}),
    ]
    assert answer["toolsUsed"] == ["files:read_file", "files:get-sum", "files:read_text_file"]
    spelled = [(n["written"], n["canonical"], n["line"]) for n in answer["canonicalSpellings"]]
    assert spelled == [
        ("mcp.files.readFile", "mcp.files.read_file", 2),
        ("mcp.files.getSum", "mcp.files.get_sum", 3),
        ("mcp.files.ReadTextFile", "mcp.files.read_text_file", 4),
    ]
    # a stored capability keeps what was written, and runs again by name
    again = await execute(capability=answer["capabilityFqdn"])
    assert again["result"] == ["read_file", "get-sum", "read_text_file"]


async def test_an_ambiguous_tool_spelling_is_unknown_and_lists_both(
    execute: Execute, upstreams: dict[str, Upstream]
) -> None:
    error = await execute.error(code="return await mcp.twins.ReadFile()")
    assert error["code"] == "UNKNOWN_TOOL"
    assert "ambiguous" in error["message"]
    assert "mcp.twins.readFile" in error["message"]
    assert "mcp.twins.read_file" in error["message"]
    assert upstreams["twins"].calls == []
    exact = await execute(code='return [(await mcp.twins.readFile())["tool"]]')
    assert exact["result"] == ["readFile"]
    assert "canonicalSpellings" not in exact


async def test_an_ambiguous_capability_spelling_is_unknown_and_lists_both(
    execute: Execute,
) -> None:
    await execute(code=READ, name="fs:read_json")
    await execute(code=READ_OTHER, name="fs:readJson")
    error = await execute.error(code="return await mcp.fs.ReadJson()")
    assert error["code"] == "UNKNOWN_TOOL"
    assert "ambiguous: did you mean mcp.fs.readJson, mcp.fs.read_json?" in error["message"]
    assert (await execute(code="return await mcp.fs.readJson()"))["result"] == "other.json"
    assert (await execute(code="return await mcp.fs.read_json()"))["result"] == "a.json"


async def test_a_snake_case_call_finds_a_camel_case_capability(execute: Execute) -> None:
    await execute(code=READ, name="web:fetchPage")
    answer = await execute(code="return await mcp.web.fetch_page()")
    assert answer["result"] == "a.json"
    [notice] = answer["canonicalSpellings"]
    assert (notice["canonical"], notice["target"]) == ("mcp.web.fetchPage", "web:fetchPage")


async def test_pml_s_own_tools_accept_camel_case_too(execute: Execute) -> None:
    await execute(code=READ, name="fs:read_json")
    answer = await execute(code='return (await mcp.pml.capLookup(name="fs:read_json"))["fqdn"]')
    assert answer["toolsUsed"] == ["pml:cap_lookup"]
    [notice] = answer["canonicalSpellings"]
    assert (notice["canonical"], notice["target"]) == ("mcp.pml.cap_lookup", "pml:cap_lookup")


async def test_another_tenant_s_capability_is_not_found_under_any_spelling(
    execute: Execute,
) -> None:
    await execute(code=READ, name="fs:read_json")
    service = execute.gateway.executor
    for code in ("return await mcp.fs.readJson()", "return await mcp.fs.READ_JSON()"):
        with pytest.raises(PmlError) as caught:
            await service.execute(OTHER, ExecuteParams(intent="steal", code=code))
        assert caught.value.code == "UNKNOWN_TOOL"
        assert "read_json" not in caught.value.message.replace("READ_JSON", "")


HOSTILE = {
    "very-long": "return await mcp.fs." + "readJson" * 40 + "()",
    "unicode": "return await mcp.fs.readJsön()",
    "injection": "return await mcp.fs[\"read_json' OR '1'='1\"]()",
    "bidi": 'return await mcp.fs["readJson\u202e"]()',
    "nul": 'return await mcp.fs["readJson\\x00"]()',
    "version-spec": 'return await mcp.fs["readJson@v1"]()',
    "separators-only": 'return await mcp.fs["___"]()',
    "wildcard": 'return await mcp.fs["read%"]()',
}


@pytest.mark.parametrize("code", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_strange_spellings_are_unknown_tools_and_nothing_runs(
    execute: Execute, upstreams: dict[str, Upstream], code: str
) -> None:
    await execute(code=READ, name="fs:read_json")
    calls = len(upstreams["a"].calls)
    error = await execute.error(code=code)
    assert error["code"] in ("UNKNOWN_TOOL", "INVALID_INPUT"), error
    assert len(error["message"]) < 5_000
    assert len(upstreams["a"].calls) == calls


async def test_upper_case_is_a_spelling_of_snake_case(execute: Execute) -> None:
    await execute(code=READ, name="fs:read_json")
    answer = await execute(code="return await mcp.fs.READ_JSON()")
    assert answer["result"] == "a.json"
    assert answer["canonicalSpellings"][0]["canonical"] == "mcp.fs.read_json"


def test_folding_splits_camel_case_and_acronyms() -> None:
    assert fold("readJson") == fold("ReadJson") == fold("READ_JSON") == "read_json"
    assert fold("getHTTPResponse") == "get_http_response"
    assert fold("get-sum") == fold("get.sum") == "get_sum"
    assert fold("sha256Sum") == "sha256_sum"
    assert folded_matches(FILE_TOOLS, "readTextFile") == ["read_text_file"]
    assert folded_matches(FILE_TOOLS, "x" * 65) == []  # not a tool name: never folded
    assert folded_matches(FILE_TOOLS, "réadFile") == []
    assert capability_variants("readJson") == ["read_json", "readjson", "ReadJson", "read-json"]
    assert capability_variants("a" * 65) == []


# Words of one letter are left out: "AB" is as much an acronym as the words a and b.
@given(st.from_regex(r"[a-z][a-z0-9]{1,6}(_[a-z][a-z0-9]{1,6}){0,4}", fullmatch=True))
def test_every_camel_case_spelling_of_a_snake_case_name_folds_back(snake: str) -> None:
    words = snake.split("_")
    camel = words[0] + "".join(word[:1].upper() + word[1:] for word in words[1:])
    pascal = "".join(word[:1].upper() + word[1:] for word in words)
    assert fold(snake) == fold(camel) == fold(pascal) == snake
    assert snake not in capability_variants(snake)
    assert len(capability_variants(camel)) <= 5


async def test_through_a_real_stdio_gateway_camel_case_reaches_the_real_tool(
    tmp_path: Path,
) -> None:
    """``pml serve --stdio`` with the real ``mcp-server-time``, driven by the SDK client."""
    time_server = RealServer(
        "time", str(python_server("mcp-server-time")), ("--local-timezone", "UTC")
    )
    config = write_config(
        tmp_path / "pml.toml", [time_server], database_url=f"sqlite:///{tmp_path / 'pml.db'}"
    )
    code = 'now = await mcp.time.getCurrentTime(timezone="UTC")\nreturn now["timezone"]'
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        answer = result_json(
            await gw.client.call_tool("pml_execute", {"intent": "what time", "code": code})
        )
        unknown = result_json(
            await gw.client.call_tool(
                "pml_execute", {"intent": "what time", "code": "return await mcp.time.now()"}
            )
        )
    assert answer["status"] == "success", answer
    assert answer["result"] == "UTC"
    assert answer["toolsUsed"] == ["time:get_current_time"]
    [notice] = answer["canonicalSpellings"]
    assert notice["canonical"] == "mcp.time.get_current_time"
    assert unknown["error"]["code"] == "UNKNOWN_TOOL"
