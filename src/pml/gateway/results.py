"""Tool results of the gateway's own tools: JSON answers, errors, capability runs.

json_result({"items": [], "total": 0})     # structuredContent + the same JSON as text
error_result(NotFound("Capability not found: x"))   # isError, {"error": {...}}
capability_result(answer)                  # a capability run as a tool result
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import mcp_types

from pml.errors import PmlError

CAPABILITY_META: Final = "pml/capability"
# The text copy of an answer is compact JSON: the model reads it, and spaces after ',' and
# ':' cost it about a fifth more tokens.
COMPACT: Final[dict[str, Any]] = {"ensure_ascii": False, "separators": (",", ":")}


def capability_result(answer: Mapping[str, Any]) -> mcp_types.CallToolResult:
    """A capability run as a tool result: its value, with PML's details in ``_meta``."""
    value = answer.get("result")
    structured: dict[str, Any] = value if isinstance(value, dict) else {"result": value}  # pyright: ignore[reportUnknownVariableType]
    text = value if isinstance(value, str) else json.dumps(value, **COMPACT, default=str)
    details = {
        key: answer[key]
        for key in ("capabilityFqdn", "capabilityName", "logs", "executionTimeMs", "routing")
        if key in answer
    }
    for warning in ("deprecatedAlias", "deprecated", "replacedBy"):
        if warning in answer:
            details[warning] = answer[warning]
    content: list[mcp_types.ContentBlock] = [mcp_types.TextContent(type="text", text=text)]
    if "deprecated" in answer:  # said where the model reads, not only in _meta
        content.append(mcp_types.TextContent(type="text", text=f"Warning: {answer['deprecated']}"))
    return mcp_types.CallToolResult(
        content=content,
        structured_content=structured,
        is_error=False,
        _meta={CAPABILITY_META: details},
    )


def json_result(data: dict[str, Any], *, is_error: bool = False) -> mcp_types.CallToolResult:
    """``data`` as ``structuredContent`` and as the same JSON in one text block."""
    try:
        text = json.dumps(data, **COMPACT)
    except (TypeError, ValueError):  # a value JSON cannot hold: show it as text, both ways
        text = json.dumps(data, **COMPACT, default=str)
        data = json.loads(text)
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)],
        structured_content=data,
        is_error=is_error,
    )


def error_result(error: PmlError) -> mcp_types.CallToolResult:
    """The ``isError`` result carrying ``{"error": {"code", "message", ...}}``."""
    return json_result({"error": error.to_dict()}, is_error=True)
