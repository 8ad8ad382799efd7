"""``pml_discover`` returns only what the request's policy lets it call (SPEC §7, §10)."""

from __future__ import annotations

from typing import Any

import pytest

from policy.conftest import OpenPolicyGateway, PolicyGateway

pytestmark = pytest.mark.anyio


async def _names(pg: PolicyGateway, intent: str, kind: str = "all") -> list[str]:
    result = await pg.call("pml_discover", {"intent": intent, "kind": kind, "limit": 50})
    assert result.is_error is False
    data: dict[str, Any] = result.structured_content or {}
    return [item["name"] for item in data["results"]]


async def test_a_read_intent_does_not_see_writes_or_the_shell(pg: PolicyGateway) -> None:
    names = await _names(pg, "read the note file in the folder", kind="tool")
    assert "filesystem:read_text_file" in names
    assert "filesystem:write_file" not in names
    assert "shell:run" not in names
    edit = await _names(pg, "write the note to a new file", kind="tool")
    assert "filesystem:write_file" in edit
    assert "shell:run" not in edit


async def test_denied_tools_and_capabilities_using_them_are_hidden(
    open_policy_gateway: OpenPolicyGateway,
) -> None:
    async with open_policy_gateway(permissions={"allow": ["filesystem:*"]}) as pg:
        is_error, _ = await pg.execute(
            intent="save the note to a file",
            code='await mcp.filesystem.write_file(path="/w/n.txt", content="n")\nreturn 1',
            name="fs:save_note",
        )
        assert is_error is False
        assert "fs:save_note" in await _names(pg, "save the note to a file")
    async with open_policy_gateway(permissions={"deny": ["filesystem:write_file"]}) as pg:
        names = await _names(pg, "save the note to a file")
    assert "fs:save_note" not in names
    assert "filesystem:write_file" not in names
    assert "filesystem:read_text_file" in names


async def test_a_chat_intent_discovers_nothing_callable(pg: PolicyGateway) -> None:
    assert await _names(pg, "/chat tell me about files and the time") == []
