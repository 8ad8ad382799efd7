"""The one error tree of PML.

Every failure a user or an agent can meet is a ``PmlError`` carrying a SPEC error code
(``SPEC.md`` §5) and a message written for a person. Edges translate: repositories turn
database errors into ``PmlError``; the MCP edge turns ``PmlError`` into an ``isError`` tool
result; the CLI prints one line and exits 1.

    PmlError
    ├── InvalidInput          INVALID_INPUT
    │   └── InvalidFqdn       INVALID_INPUT   (``Invalid FQDN format: ...``)
    ├── ConfigError           CONFIG_ERROR
    ├── InvalidName           INVALID_NAME
    ├── NameTaken             NAME_TAKEN
    ├── NotFound              NOT_FOUND
    ├── VersionNotFound       VERSION_NOT_FOUND
    ├── InvalidArgs           INVALID_ARGS
    ├── CodeTooLarge          CODE_TOO_LARGE
    ├── CodeSyntaxError       SYNTAX_ERROR
    ├── UnknownTool           UNKNOWN_TOOL
    ├── PolicyDenied          POLICY_DENIED
    ├── PermissionDenied      PERMISSION_DENIED
    ├── ApprovalRequired      APPROVAL_REQUIRED (a call waits for a person: the run pauses)
    ├── ExecutionTimeout      TIMEOUT
    ├── LimitExceeded         LIMIT_EXCEEDED
    ├── ExecutionFailed       EXECUTION_FAILED
    ├── ToolCallError         TOOL_ERROR
    ├── UpstreamUnavailable   UPSTREAM_UNAVAILABLE
    ├── StorageError          STORAGE_ERROR
    ├── NotAvailable          NOT_AVAILABLE   (a tool whose service this gateway runs without)
    ├── Unauthorized          UNAUTHORIZED    (no valid API key: HTTP 401)
    ├── Forbidden             FORBIDDEN       (the key's role may not do this: HTTP 403)
    ├── AlreadyDecided        ALREADY_DECIDED (an approval a person has decided already)
    ├── Busy                  BUSY            (the tenant's fair-share queue is full: retryAfterS)
    ├── RateLimited           RATE_LIMITED    (a per-key or per-address rate limit: retryAfterS)
    └── InternalError         INTERNAL_ERROR  (a bug: logged, generic message to the caller)

Example::

    >>> err = NotFound("Capability not found: my-reader")
    >>> err.to_dict()
    {'code': 'NOT_FOUND', 'message': 'Capability not found: my-reader'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class PmlError(Exception):
    """Root of every PML error: a SPEC error code, a message, and optional data."""

    code: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def to_dict(self) -> dict[str, Any]:
        """The ``{"code", "message", ...}`` object carried by error results."""
        return {"code": self.code, "message": self.message, **self.data}

    def __str__(self) -> str:
        return self.message


class InvalidInput(PmlError):
    code = "INVALID_INPUT"


class InvalidFqdn(InvalidInput):
    pass


class ConfigError(PmlError):
    code = "CONFIG_ERROR"


class InvalidName(PmlError):
    code = "INVALID_NAME"


class NameTaken(PmlError):
    code = "NAME_TAKEN"


class NotFound(PmlError):
    code = "NOT_FOUND"


class VersionNotFound(PmlError):
    code = "VERSION_NOT_FOUND"


class InvalidArgs(PmlError):
    code = "INVALID_ARGS"


class CodeTooLarge(PmlError):
    code = "CODE_TOO_LARGE"


class CodeSyntaxError(PmlError):
    code = "SYNTAX_ERROR"


class UnknownTool(PmlError):
    code = "UNKNOWN_TOOL"


class PolicyDenied(PmlError):
    code = "POLICY_DENIED"


class PermissionDenied(PmlError):
    code = "PERMISSION_DENIED"


class ApprovalRequired(PmlError):
    """A tool call needs a person's approval: the run stops here and can be resumed.

    Not a failure the caller sees as such: ``pml_execute`` answers
    ``{"status": "approval_required", ...}`` with the data of this error.
    """

    code = "APPROVAL_REQUIRED"


class ExecutionTimeout(PmlError):
    code = "TIMEOUT"


class LimitExceeded(PmlError):
    code = "LIMIT_EXCEEDED"


class ExecutionFailed(PmlError):
    code = "EXECUTION_FAILED"


class ToolCallError(PmlError):
    code = "TOOL_ERROR"


class UpstreamUnavailable(PmlError):
    code = "UPSTREAM_UNAVAILABLE"


class ClientToolsRequireClient(PmlError):
    """Code that uses tools on the user's machine, from a caller that cannot run it there."""

    code = "CLIENT_TOOLS_REQUIRE_CLIENT"


class StorageError(PmlError):
    code = "STORAGE_ERROR"


class NotAvailable(PmlError):
    code = "NOT_AVAILABLE"


class Unauthorized(PmlError):
    code = "UNAUTHORIZED"


class Forbidden(PmlError):
    code = "FORBIDDEN"


class AlreadyDecided(PmlError):
    code = "ALREADY_DECIDED"


def _retry_after(given: float | None, data: dict[str, Any]) -> float:
    """The delay of a BUSY/RATE_LIMITED error: given, or read back from ``retryAfterS``."""
    carried = data.pop("retryAfterS", None)
    value = given if given is not None else carried
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        value = 1.0
    return round(min(max(float(value), 0.0), 86_400.0), 3)


class Busy(PmlError):
    """The caller's fair-share queue (sandbox runs, query embeddings) is full; ``retryAfterS``
    says when to retry."""

    code = "BUSY"

    def __init__(self, message: str, *, retry_after_s: float | None = None, **data: Any) -> None:
        delay = _retry_after(retry_after_s, data)
        super().__init__(message, retryAfterS=delay, **data)
        self.retry_after_s = delay


class RateLimited(PmlError):
    """A rate limit (per API key, or per source address for failed keys) refused the request;
    ``retryAfterS`` says when a token is free again. Over HTTP: 429 with ``Retry-After``."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, *, retry_after_s: float | None = None, **data: Any) -> None:
        delay = _retry_after(retry_after_s, data)
        super().__init__(message, retryAfterS=delay, **data)
        self.retry_after_s = delay


class InternalError(PmlError):
    code = "INTERNAL_ERROR"


def error_from_dict(data: Mapping[str, Any]) -> PmlError:
    """The error an error result carried (``to_dict()`` read back; unknown codes: internal)."""
    code = data.get("code")
    message = data.get("message")
    extra = {k: v for k, v in data.items() if k not in ("code", "message")}
    text = message if isinstance(message, str) else "unknown error"
    pending: list[type[PmlError]] = [PmlError]
    while pending:
        cls = pending.pop()
        if cls.code == code and cls is not PmlError:
            return cls(text, **extra)
        pending.extend(cls.__subclasses__())
    return InternalError(text, **extra)
