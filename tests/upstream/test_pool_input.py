"""Hostile and mistaken input to ``call_tool``: clear errors, nothing started or broken."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from pml.errors import InvalidArgs, InvalidInput, UnknownTool
from pml.upstream.pool import ClientPool
from upstream.helpers import ChangingServer, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pool() -> AsyncGenerator[ClientPool]:
    servers = {
        "filesystem": ChangingServer("filesystem").server,
        "memory": ChangingServer("memory").server,
    }
    async with ClientPool(servers) as running:
        yield running


async def test_an_unknown_server_is_named_with_close_matches(pool: ClientPool) -> None:
    with pytest.raises(UnknownTool) as error:
        await pool.call_tool("filesytem", "echo")
    assert error.value.code == "UNKNOWN_TOOL"
    assert str(error.value) == "Unknown upstream server 'filesytem'; did you mean filesystem?"
    assert error.value.data["suggestions"] == ["filesystem"]

    with pytest.raises(UnknownTool, match="configured servers: filesystem, memory"):
        await pool.call_tool("zzz", "echo")


async def test_an_unknown_tool_lists_close_matches(pool: ClientPool) -> None:
    with pytest.raises(UnknownTool) as error:
        await pool.call_tool("memory", "ecko")
    assert str(error.value) == (
        "Unknown tool memory:ecko (server 'memory' lists 3 tools); did you mean memory:echo?"
    )


async def test_a_tool_of_another_server_is_suggested_there(pool: ClientPool) -> None:
    async with ClientPool({"a": ChangingServer().server, "b": _only_extra()}) as both:
        with pytest.raises(UnknownTool, match=r"did you mean b:extra\?"):
            await both.call_tool("a", "extra")
    assert pool.status()[0].state == "running"


def _only_extra() -> Any:
    server = ChangingServer("b")
    server.tools = [server.tools[0].model_copy(update={"name": "extra"})]
    return server.server


async def test_a_ten_thousand_character_tool_name_gets_a_short_message(pool: ClientPool) -> None:
    with pytest.raises(UnknownTool) as error:
        await pool.call_tool("memory", "x" * 10_000)
    assert len(str(error.value)) < 200
    assert "(10000 characters)" in str(error.value)


async def test_control_characters_in_names_are_escaped(pool: ClientPool) -> None:
    with pytest.raises(UnknownTool) as error:
        await pool.call_tool("mem\x1b[2J", "echo")
    assert "\x1b" not in str(error.value)
    assert "mem\\x1b[2J" in str(error.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["text", "hi"], "must be an object (names to values), not list"),
        ("text=hi", "must be an object (names to values), not str"),
        ({1: "hi"}, "Argument names for memory:echo must be strings, not int"),
        ({"text": object()}, "are not JSON values"),
    ],
)
async def test_arguments_that_are_not_a_json_object_are_refused(
    pool: ClientPool, arguments: Any, message: str
) -> None:
    with pytest.raises(InvalidArgs, match=re.escape(message)) as error:
        await pool.call_tool("memory", "echo", arguments)
    assert error.value.code == "INVALID_ARGS"
    assert text_of(await pool.call_tool("memory", "echo", {"text": "still fine"})) == "memory"


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), "5", True])
async def test_a_bad_timeout_is_refused(pool: ClientPool, seconds: Any) -> None:
    with pytest.raises(InvalidInput, match="timeout_s"):
        await pool.call_tool("memory", "echo", timeout_s=seconds)


@pytest.mark.parametrize("server", [None, 42, ["memory"], ""])
async def test_a_server_name_that_is_not_text_is_unknown(pool: ClientPool, server: Any) -> None:
    with pytest.raises(UnknownTool, match="Unknown upstream server"):
        await pool.call_tool(server, "echo")


@pytest.mark.parametrize("tool", [None, 7, ""])
async def test_a_tool_name_that_is_not_text_is_refused(pool: ClientPool, tool: Any) -> None:
    with pytest.raises(InvalidInput, match="non-empty string"):
        await pool.call_tool("memory", tool)
