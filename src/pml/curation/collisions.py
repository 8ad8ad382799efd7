"""The names already used in one org/project, and free variants of a wanted name.

    book = NameBook(names={"fs:read_json": fqdn_a}, tool_names={"mcp__fs__read_json": fqdn_a})
    book.free_variant("fs", "read_json", owner=fqdn_b)    # ("fs:read_json_2", 2)
    book.reserve("fs:read_json_2", fqdn_b)                 # later suggestions avoid it

A name is free for a capability when neither it nor the MCP tool name it gives is used by
another record as a display name, an alias or a tool name (the registry's own rule, so a
suggestion that looks free here is accepted by ``cap_rename``, barring a race). A taken name
gets the suffix ``_2``, ``_3``, ... (the action is shortened so the name stays within 64
characters); its uniqueness score is ``1 / k`` for the suffix ``_k``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pml.registry.names import NAME_PATTERN, split_display_name, tool_name_for

MAX_NAME: Final = 64
MAX_SUFFIX: Final = 999


class NameBook:
    """Display names, aliases and tool names in use (each → its owner's FQDN)."""

    def __init__(self, names: Mapping[str, str], tool_names: Mapping[str, str]) -> None:
        self._names = dict(names)
        self._tool_names = dict(tool_names)

    def is_free(self, name: str, owner: str) -> bool:
        """Whether ``owner`` may take ``name`` (its own names and aliases are free to it)."""
        if NAME_PATTERN.fullmatch(name) is None:
            return False
        namespace, action = split_display_name(name, "code")
        tool_name = tool_name_for(namespace, action)
        return all(
            holder in (None, owner)
            for holder in (
                self._names.get(name),
                self._tool_names.get(tool_name),
                self._tool_names.get(name),
                self._names.get(tool_name),
            )
        )

    def reserve(self, name: str, owner: str) -> None:
        """Count ``name`` (and its tool name) as used by ``owner`` from now on."""
        namespace, action = split_display_name(name, "code")
        self._names[name] = owner
        self._tool_names[tool_name_for(namespace, action)] = owner

    def free_variant(self, namespace: str, action: str, owner: str) -> tuple[str, int] | None:
        """The first free ``namespace:action[_k]`` and its ``k`` (1 without a suffix)."""
        base = f"{namespace}:{action}"[:MAX_NAME]
        if self.is_free(base, owner):
            return base, 1
        for k in range(2, MAX_SUFFIX + 1):
            suffix = f"_{k}"
            name = base[: MAX_NAME - len(suffix)] + suffix
            if self.is_free(name, owner):
                return name, k
        return None
