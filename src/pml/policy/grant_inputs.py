"""Validation of what a grant is issued with: each bad field is ``INVALID_INPUT`` naming it.

check_capability("file_write")      # "file_write"
check_tool_pattern("*")             # "*:*"
check_path_prefix("/data/../x")     # "/x"
check_domain("Example.COM")         # "example.com"
"""

from __future__ import annotations

import math
import re

from pml.errors import InvalidInput
from pml.policy.arguments import ascii_host, normalise_path
from pml.policy.model import CAPABILITIES, PermissionCapability
from pml.policy.tool_patterns import BadPattern, split_pattern

MAX_TOOL_PATTERN = 200
MAX_PURPOSE = 500
MAX_PATH_PREFIX = 1024
MAX_DECIDED_BY = 200
MAX_USES = 2**31 - 1
MAX_TTL_S = 100 * 365 * 86_400.0
DIGEST = re.compile(r"[0-9a-f]{16,64}")
HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"Invalid {field}: {message}", field=field)


def check_capability(value: object) -> PermissionCapability:
    """The value as a permission capability, or INVALID_INPUT naming the allowed ones."""
    for capability in CAPABILITIES:
        if value == capability:
            return capability
    raise invalid("capability", f"{value!r}. Use one of: {', '.join(CAPABILITIES)}.")


def check_tool_pattern(value: object) -> str:
    """A ``server:tool`` glob of at most 200 characters (``*`` stands for ``*:*``)."""
    if isinstance(value, str) and len(value) > MAX_TOOL_PATTERN:
        raise invalid("tool_pattern", f"longer than {MAX_TOOL_PATTERN} characters")
    try:
        server, tool = split_pattern(value)
    except BadPattern as error:
        raise invalid("tool_pattern", str(error)) from None
    return f"{server}:{tool}"


def check_path_prefix(value: object) -> str | None:
    """An absolute POSIX path, normalised (``/data/../x`` is ``/x``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise invalid("path_prefix", f"{value!r:.80} is not an absolute path")
    if len(value) > MAX_PATH_PREFIX or "\\" in value or not value.isprintable():
        raise invalid("path_prefix", "too long, or has a backslash or control character")
    return normalise_path(value)


def check_domain(value: object) -> str | None:
    """A host name (IDNA allowed), stored lower-case ASCII."""
    if value is None:
        return None
    host = ascii_host(value) if isinstance(value, str) and value.isprintable() else None
    if (
        host is None
        or len(host) > 253
        or not all(HOST_LABEL.fullmatch(label) for label in host.split("."))
    ):
        raise invalid("domain", f"{value!r:.80} is not a host name")
    return host


def check_ttl(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid("ttl_s", f"{value!r:.80} is not a number of seconds")
    if not math.isfinite(value) or value <= 0 or value > MAX_TTL_S:
        raise invalid("ttl_s", "must be more than 0 and at most 100 years")
    return float(value)


def check_max_uses(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_USES:
        raise invalid("max_uses", f"{value!r:.80} is not a whole number of at least 1")
    return value


def check_text(field: str, value: object, limit: int, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit or (not optional and not value):
        raise invalid(field, f"must be a string of at most {limit} characters")
    return value


def check_digest(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not DIGEST.fullmatch(value):
        raise invalid("args_digest", "must be 16-64 lower-case hex characters")
    return value
