"""Who is asking: the org, project and user every registry call is made for.

    scope = Scope(org="acme", project="webapp", user="erwan")
    scope.key  # "acme.webapp"

Visibility decides which records a scope can see: ``private`` (its creator, in its own
org/project), ``project`` (its org/project), ``org`` (its whole org), ``public`` (everyone).
A record a scope cannot see behaves exactly like a missing one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from pml.errors import InvalidInput

Visibility = Literal["private", "project", "org", "public"]
VISIBILITIES: tuple[Visibility, ...] = get_args(Visibility)
RecordType = Literal["capability", "mcp-server"]

SCOPE_PART = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class Scope:
    """The caller's org, project and user."""

    org: str
    project: str
    user: str

    def __post_init__(self) -> None:
        for field, value in (("org", self.org), ("project", self.project)):
            if not isinstance(value, str) or not SCOPE_PART.fullmatch(value):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise InvalidInput(
                    f"Invalid {field}: {value!r}. Use 1-64 letters, digits, '_' or '-'.",
                    field=field,
                )
        if not isinstance(self.user, str) or not self.user or len(self.user) > 128:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput("Invalid user: must be 1-128 characters.", field="user")

    @property
    def key(self) -> str:
        """``org.project``, as error messages name the scope."""
        return f"{self.org}.{self.project}"

    @property
    def tenant(self) -> tuple[str, str, str]:
        """``(org, project, user)``: whom work is counted for where tenants take turns."""
        return (self.org, self.project, self.user)


Role = Literal["agent", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its scope, the role of its key and which key it is.

    ``agent`` keys use the MCP surface and see their own user's audit events; ``admin``
    keys may also decide approvals and see every user's events of their org/project."""

    scope: Scope
    role: Role = "agent"
    key_id: str | None = None
    key_prefix: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def check_role(value: object) -> Role:
    """The value as a key role, or ``INVALID_INPUT`` naming the allowed ones."""
    for allowed in ROLES:
        if value == allowed:
            return allowed
    raise InvalidInput(f"Invalid role: {value!r}. Use one of: {', '.join(ROLES)}.", field="role")


def check_visibility(value: object) -> Visibility:
    """The value as a visibility, or ``INVALID_INPUT`` naming the allowed ones."""
    for allowed in VISIBILITIES:
        if value == allowed:
            return allowed
    raise InvalidInput(
        f"Invalid visibility: {value!r}. Use one of: {', '.join(VISIBILITIES)}.",
        field="visibility",
    )
