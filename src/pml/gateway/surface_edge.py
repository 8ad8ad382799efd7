"""What every prompt, resource, completion and logging handler of the gateway shares.

    edge = SurfaceEdge(scope_of=request_scope, track=notifier.track, auditor=audit)
    scope = edge.caller(ctx)                       # who asks (refused without a scope)
    async with edge.upstream("everything"):        # errors → clear JSON-RPC errors
        result = await client.get_prompt(...)
    edge.audit(ctx, scope, "PROMPT_GET", {"server": "everything", "prompt": "simple-prompt"})

Errors reach the client as JSON-RPC errors: bad input and unknown names are
``-32602`` (invalid params), an unknown resource ``-32002`` (resource not found), an upstream
server that is down or slow ``-32603``; ``data`` carries PML's ``{"code", "message", ...}``.
An upstream server's own error keeps its code, its message prefixed with the server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError

from pml.errors import InvalidArgs, InvalidInput, NotFound, PmlError, UnknownTool
from pml.gateway.notify import Context
from pml.policy.model import Auditor
from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

RESOURCE_NOT_FOUND: Final = -32002
CALL_TIMEOUT_S: Final = 60.0
_BAD_INPUT = (InvalidInput, InvalidArgs, UnknownTool)


def as_mcp_error(error: PmlError) -> MCPError:
    """A PML error as the JSON-RPC error a client gets."""
    if isinstance(error, _BAD_INPUT):
        code = mcp_types.INVALID_PARAMS
    elif isinstance(error, NotFound):
        code = RESOURCE_NOT_FOUND
    else:
        code = mcp_types.INTERNAL_ERROR
    return MCPError(code, error.message, data=error.to_dict())


@dataclass(frozen=True, slots=True)
class SurfaceEdge:
    """The caller's scope, session tracking, audit, and error translation."""

    scope_of: Callable[[Context], Scope]
    track: Callable[[Context, Scope], None]
    auditor: Auditor | None = None
    timeout_s: float = CALL_TIMEOUT_S

    def caller(self, ctx: Context) -> Scope:
        """The caller's scope (an ``MCPError`` without one); its session is tracked for
        the list-changed notifications."""
        scope = self.scope_of(ctx)
        self.track(ctx, scope)
        return scope

    def audit(self, ctx: Context, scope: Scope, event: str, details: Mapping[str, Any]) -> None:
        """Audit one event of the caller's request (never raises)."""
        if self.auditor is None:
            return
        request_id = None if ctx.request_id is None else str(ctx.request_id)
        self.auditor.emit(
            event, scope=scope, details=details, actor=scope.user, request_id=request_id
        )

    @asynccontextmanager
    async def upstream(self, server: str) -> AsyncGenerator[None]:
        """Run one request to ``server``: bounded in time, its failures as JSON-RPC errors."""
        try:
            with anyio.fail_after(self.timeout_s):
                yield
        except PmlError as error:
            raise as_mcp_error(error) from None
        except MCPError as error:
            raise MCPError(
                error.code, f"Upstream server '{server}': {error.message}", error.data
            ) from None
        except TimeoutError:
            raise MCPError(
                mcp_types.INTERNAL_ERROR,
                f"Upstream server '{server}' did not answer within {self.timeout_s:g} s",
            ) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
            logger.warning("upstream server %r: connection failed: %s", server, error)
            raise MCPError(
                mcp_types.INTERNAL_ERROR, f"Upstream server '{server}' closed the connection"
            ) from None


@contextmanager
def translating() -> Generator[None]:
    """Raise a ``PmlError`` of the block (routing, input checks) as a JSON-RPC error."""
    try:
        yield
    except PmlError as error:
        raise as_mcp_error(error) from None
