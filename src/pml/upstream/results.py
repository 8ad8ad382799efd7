"""Upstream results nested too deep: a ``TOOL_ERROR`` naming the tool, never a crash.

    check_result_depth("deep", "dump", result)     # ToolCallError when nested too deep

PML refuses JSON nested more than ``MAX_JSON_DEPTH`` levels (``pml.wire_json``). A tool
result is checked when it arrives, before anything walks it: the result object, and the
text a snippet would parse as JSON (every block text, SPEC §4). A result too deep for the
SDK to parse at all is answered as an error by the transport (``results_wire``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import mcp_types

from pml.errors import ToolCallError
from pml.upstream.messages import show
from pml.wire_json import MAX_JSON_DEPTH, text_too_deep, value_too_deep


def check_result_depth(server: str, tool: str, result: object) -> None:
    """Raise ``ToolCallError`` when ``result`` (typed or the server's JSON object), or the
    JSON its text blocks hold, is nested more than ``MAX_JSON_DEPTH`` levels."""
    if isinstance(result, mcp_types.CallToolResult):
        parts: list[object] = [result.structured_content, result.meta]
        blocks: list[object] = [{"text": getattr(block, "text", None)} for block in result.content]
        too_deep = value_too_deep(parts, MAX_JSON_DEPTH)
    elif isinstance(result, Mapping):
        found = cast("Mapping[str, Any]", result)
        content: object = found.get("content")
        blocks = cast("list[object]", content) if isinstance(content, list) else []
        too_deep = value_too_deep(dict(found), MAX_JSON_DEPTH)
    else:
        return
    if too_deep or text_too_deep(_text_of(blocks)):
        raise ToolCallError(
            f"Upstream tool {server}:{show(tool)} returned JSON nested more than "
            f"{MAX_JSON_DEPTH} levels deep",
            server=server,
            tool=tool,
        )


def _text_of(blocks: list[object]) -> str:
    """The text a snippet would parse as JSON: the blocks' texts, when every block is text."""
    texts: list[str] = []
    for block in blocks:
        text = cast("dict[str, Any]", block).get("text") if isinstance(block, dict) else None
        if not isinstance(text, str):
            return ""
        texts.append(text)
    return "\n".join(texts)
