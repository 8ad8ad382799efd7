"""The HTTP answer of a rate limit: ``429 Too Many Requests`` with ``Retry-After``.

    response = too_many_requests("/mcp", RateLimited("...", retry_after_s=0.4))
    # 429, Retry-After: 1, a JSON-RPC error carrying {"code": "RATE_LIMITED", ...} in data

``Retry-After`` is whole seconds, rounded up, at least 1 (RFC 9110 has no fractions);
``retryAfterS`` in the body is the exact delay. Requests to ``/mcp`` get a JSON-RPC error
object (``id`` null: the body is not read) whose ``data`` is the PML error, so an MCP SDK
client surfaces it as the error of its request; every other path gets PML's
``{"error": {"code", "message", "retryAfterS", ...}}``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from starlette.responses import JSONResponse, Response

from pml.errors import RateLimited

# A JSON-RPC server error code (-32000 to -32099 are the implementation's own); 29 for 429.
JSONRPC_RATE_LIMITED: Final = -32029
MCP_PATH: Final = "/mcp"


def retry_after_header(seconds: float) -> str:
    """``Retry-After``'s value for a delay of ``seconds``: whole seconds, rounded up, >= 1."""
    if not seconds > 0 or math.isinf(seconds):
        return "1" if not seconds > 0 else "86400"
    return str(max(1, math.ceil(seconds)))


def too_many_requests(path: str, error: RateLimited) -> Response:
    """The 429 answer of ``error`` to a request for ``path`` (see the module)."""
    headers = {"Retry-After": retry_after_header(error.retry_after_s)}
    body: dict[str, Any]
    if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": JSONRPC_RATE_LIMITED,
                "message": error.message,
                "data": error.to_dict(),
            },
        }
    else:
        body = {"error": error.to_dict()}
    return JSONResponse(body, status_code=429, headers=headers)
