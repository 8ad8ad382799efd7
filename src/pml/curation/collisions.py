"""The names already used in one org/project, and free variants of a wanted name.

    book = NameBook(names={"fs:read_json": fqdn_a}, tool_names={"mcp__fs__read_json": fqdn_a})
    book.free_variant("fs", "read_json", owner=fqdn_b)    # ("fs:read_json_2", 2)
    book.reserve("fs:read_json_2", fqdn_b)                 # later suggestions avoid it

A name is free for a capability when neither it nor the MCP tool name it gives is used by
another record as a display name, an alias or a tool name (the registry's own rule, so a
suggestion that looks free here is accepted by ``cap_rename``, barring a race). A taken name
gets the suffix ``_2``, ``_3``, ... (the action is shortened so the name stays within 64
characters); its uniqueness score is ``1 / k`` for the suffix ``_k``.

Finding a variant is amortised constant time: the book remembers, per wanted name, the
first suffix not yet looked at, and who holds each variant below it (names are only ever
added to a book, so such a variant can only ever be free again to those holders). A
suggest run over 200 capabilities wanting the same name no longer tries 200 suffixes each.
"""

from __future__ import annotations

from collections import defaultdict
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
        # Per wanted name: the first suffix not looked at yet, and the suffixes below it
        # that each holder may still take (the others are taken, or invalid, for all).
        self._next_suffix: dict[str, int] = {}
        self._held_variants: defaultdict[str, defaultdict[str, list[int]]] = defaultdict(
            lambda: defaultdict(list)
        )

    def is_free(self, name: str, owner: str) -> bool:
        """Whether ``owner`` may take ``name`` (its own names and aliases are free to it)."""
        holders = self._holders(name)
        return holders is not None and holders <= {owner}

    def _holders(self, name: str) -> set[str] | None:
        """Who holds ``name`` or the tool name it gives (None: not a valid name)."""
        if NAME_PATTERN.fullmatch(name) is None:
            return None
        namespace, action = split_display_name(name, "code")
        tool_name = tool_name_for(namespace, action)
        found = (
            self._names.get(name),
            self._tool_names.get(tool_name),
            self._tool_names.get(name),
            self._names.get(tool_name),
        )
        return {holder for holder in found if holder is not None}

    def reserve(self, name: str, owner: str) -> None:
        """Count ``name`` (and its tool name) as used by ``owner`` from now on."""
        namespace, action = split_display_name(name, "code")
        tool_name = tool_name_for(namespace, action)
        self._names[name] = owner
        self._tool_names[tool_name] = owner

    def free_variant(self, namespace: str, action: str, owner: str) -> tuple[str, int] | None:
        """The first free ``namespace:action[_k]`` and its ``k`` (1 without a suffix)."""
        base = f"{namespace}:{action}"[:MAX_NAME]
        if self.is_free(base, owner):
            return base, 1
        held = self._held_variants[base]
        for k in held.get(owner, ()):  # in increasing order, all below the first unseen
            if self.is_free(_variant(base, k), owner):
                return _variant(base, k), k
        for k in range(self._next_suffix.get(base, 2), MAX_SUFFIX + 1):
            name = _variant(base, k)
            holders = self._holders(name)
            if holders is not None and holders <= {owner}:
                return name, k
            # Not free to this owner, so never free again to anyone but its holders.
            self._next_suffix[base] = k + 1
            for holder in holders or ():
                held[holder].append(k)
        return None


def _variant(base: str, k: int) -> str:
    """``base`` with the suffix ``_k``, shortened to stay within ``MAX_NAME``."""
    suffix = f"_{k}"
    return base[: MAX_NAME - len(suffix)] + suffix
