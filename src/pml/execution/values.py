"""What a snippet sees of a tool result, and how arguments are checked (SPEC §4, §5).

>>> >>> text = mcp_types.TextContent(type="text", text='{"n": 1}')
>>> snippet_value(mcp_types.CallToolResult(content=[text]))
{'n': 1}
>>> merged_args({"properties": {"path": {"default": "a.json"}}}, {"mode": "r"})
{'path': 'a.json', 'mode': 'r'}
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from pml.errors import InvalidArgs, LimitExceeded
from pml.sandbox.base import SnippetToolError
from pml.sandbox.truncate import MAX_ERROR_BYTES, bounded_text

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

VALIDATOR_CACHE_SIZE = 512
MAX_LISTED_FAILURES = 10
MAX_FAILURE_CHARS = 300
# An upstream's error text, with room left for the "Tool <name> failed: " that may wrap it.
MAX_TOOL_ERROR_BYTES = MAX_ERROR_BYTES - 1024


def snippet_value(result: Mapping[str, Any]) -> Any:
    """``structuredContent``, else the text parsed as JSON, else the text, else the blocks.

    ``result`` is a tool result as the server sent it (JSON object, protocol-checked).
    """
    structured = result.get("structuredContent")
    if structured is not None:
        return structured
    blocks = _blocks(result)
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    if blocks and len(texts) == len(blocks) and all(isinstance(t, str) for t in texts):
        text = "\n".join(cast("list[str]", texts))
        try:
            return json.loads(text)
        except ValueError:
            return text
    return blocks


def raise_for_error(tool: str, result: Mapping[str, Any]) -> None:
    """An ``isError`` result becomes the snippet's ``ToolError`` (``SnippetToolError``),
    its text cut to ``MAX_TOOL_ERROR_BYTES`` (an upstream's error text is bounded too)."""
    if result.get("isError") is True:
        message = bounded_text(_error_message(result), MAX_TOOL_ERROR_BYTES)
        raise SnippetToolError(tool, message)


def too_large_result(address: str, limit: int) -> LimitExceeded:
    """``LIMIT_EXCEEDED`` for one tool result over ``limit`` bytes (``max_tool_result_bytes``)."""
    return LimitExceeded(
        f"Tool {address} returned more than {limit} bytes (the limit of one tool result): "
        "ask it for less (a range, a page, a filter)",
        limit="max_tool_result_bytes",
        tool=address,
    )


def _blocks(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    content: object = result.get("content")
    if not isinstance(content, list):
        return []
    return [cast("dict[str, Any]", b) for b in cast("list[object]", content) if isinstance(b, dict)]


def _error_message(result: Mapping[str, Any]) -> str:
    structured: object = result.get("structuredContent")
    if isinstance(structured, dict):
        error: object = cast("dict[str, Any]", structured).get("error")
        if isinstance(error, dict):
            message: object = cast("dict[str, Any]", error).get("message")
            if isinstance(message, str):
                return message
    texts = [b["text"] for b in _blocks(result) if isinstance(b.get("text"), str)]
    return "\n".join(texts) or "the tool reported an error"


def merged_args(schema: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """``given`` over the defaults of the schema's properties."""
    merged: dict[str, Any] = {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, spec in cast("dict[str, Any]", properties).items():
            if isinstance(spec, dict) and "default" in spec:
                merged[name] = cast("dict[str, Any]", spec)["default"]
    merged.update(given or {})
    return merged


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def _validator(schema_json: str) -> Draft202012Validator | None:
    """A checked validator per distinct schema (checking a schema costs ~1 ms); None when
    the schema is not valid JSON Schema."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError, UnknownType

    schema = json.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except (SchemaError, UnknownType):
        return None
    return Draft202012Validator(schema)


def check_args(schema: Mapping[str, Any], args: Mapping[str, Any], *, capability: str) -> None:
    """``INVALID_ARGS`` listing every way ``args`` fails ``schema`` (a bad schema: none)."""
    # here, not at the top: a gateway that runs no capability with arguments never loads it
    from jsonschema.exceptions import SchemaError, UnknownType

    try:
        validator = _validator(json.dumps(schema, sort_keys=True, default=str))
        if validator is None:
            return  # a stored schema PML did not write; the code checks its own arguments
        found: list[Any] = list(validator.iter_errors(dict(args)))  # pyright: ignore[reportUnknownMemberType]
        failures = sorted(found, key=lambda e: [str(part) for part in e.absolute_path])
    except (SchemaError, UnknownType):
        return  # a stored schema PML did not write; the code checks its own arguments
    if not failures:
        return
    listed = [_describe(failure.absolute_path, failure.message) for failure in failures]
    shown = "; ".join(listed[:MAX_LISTED_FAILURES])
    more = len(listed) - MAX_LISTED_FAILURES
    if more > 0:
        shown += f"; and {more} more"
    raise InvalidArgs(f"Invalid arguments for {capability}: {shown}", failures=listed[:50])


def _describe(path: Any, message: str) -> str:
    # jsonschema quotes the offending value: a huge argument must not make a huge error.
    where = "/".join(str(part) for part in path)[:MAX_FAILURE_CHARS]
    if len(message) > MAX_FAILURE_CHARS:
        message = message[: MAX_FAILURE_CHARS - 1] + "…"
    return f"{where}: {message}" if where else message


def args_digest(arguments: Mapping[str, Any]) -> str:
    """A short stable digest of a call's arguments (traces keep this, never the values)."""
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]
