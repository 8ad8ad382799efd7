"""Which permission capability each upstream tool needs (SPEC §10.2).

    cmap = CapabilityMap.from_settings(settings.policy)
    cmap.capability_of("filesystem", "write_file")    # "file_write"
    cmap.capability_of("git", "git_diff_staged")       # "file_read"
    cmap.capability_of("acme", "frobnicate")           # "unknown"

Every tool maps to exactly one capability: the first ``[policy.capabilities]`` pattern that
matches (``"server:tool"`` globs, fnmatch-style and case-sensitive, in the table's order),
then the built-in defaults, else ``"unknown"`` (which the permission rules ask about).

The defaults name the reference servers under the names they are usually configured with
(``filesystem`` / ``fs``, ``git``, ``memory``, ...). Multi-purpose servers list their tools
one by one, so a tool a newer release adds stays ``unknown`` until someone maps it;
single-purpose servers (``time``, ``fetch``, shells, browsers, web search) map as a whole.
The tool names of servers PML does not know are not guessed from, with one exception: a
tool whose name contains ``web_search`` (``brave_web_search``, ``web_search_exa``) is
``web_search``. Its name states what it does, web search reaches nothing of the user's, and
the policy gate keeps it out of every intent but the web ones.

Results are cached per ``(server, tool)`` (bounded), so the enforcement point's lookup is
one dict access after the first call.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from fnmatch import translate
from typing import Final, Literal

from pml.errors import ConfigError, InvalidInput
from pml.policy.model import CAPABILITIES, PermissionCapability
from pml.registry.fqdn import message_value
from pml.registry.names import tool_ref_parts
from pml.sections import PolicySettings

CACHE_SIZE: Final = 4096
# Longer names are matched but not cached (MCP tool names are at most 128 characters).
_CACHED_NAME_CHARS: Final = 256

Source = Literal["config", "default"]

_Group = tuple[tuple[str, ...], tuple[tuple[PermissionCapability, tuple[str, ...]], ...]]

_FILESYSTEM_READS = (
    "read_file",
    "read_text_file",
    "read_media_file",
    "read_multiple_files",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
)
_EVERYTHING_COMPUTE = (
    # @modelcontextprotocol/server-everything 2025.9 and later
    "echo",
    "get-annotated-message",
    "get-resource-links",
    "get-resource-reference",
    "get-roots-list",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "simulate-research-query",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-elicitation-request",
    "trigger-long-running-operation",
    "trigger-sampling-request",
    # earlier releases
    "add",
    "annotatedMessage",
    "getResourceLinks",
    "getResourceReference",
    "getTinyImage",
    "listRoots",
    "longRunningOperation",
    "sampleLLM",
    "startElicitation",
    "structuredContent",
)

# (server names, ((capability, tool globs), ...)), in matching order. Server names are
# literal (an index finds them); "*" marks the rules that apply to every server.
DEFAULT_GROUPS: Final[tuple[_Group, ...]] = (
    (
        ("filesystem", "fs", "files", "server-filesystem"),
        (
            ("file_read", _FILESYSTEM_READS),
            ("file_write", ("write_file", "edit_file", "create_directory", "move_file")),
        ),
    ),
    (
        ("git", "mcp-server-git"),
        (
            ("file_read", ("git_status", "git_diff*", "git_log", "git_show", "git_branch")),
            (
                "file_write",
                (
                    "git_commit",
                    "git_add",
                    "git_reset",
                    "git_create_branch",
                    "git_checkout",
                    "git_init",
                ),
            ),
        ),
    ),
    (
        ("memory", "server-memory", "knowledge-graph"),
        (
            ("memory_read", ("read_graph", "search_nodes", "open_nodes")),
            (
                "memory_write",
                (
                    "create_entities",
                    "create_relations",
                    "add_observations",
                    "delete_entities",
                    "delete_observations",
                    "delete_relations",
                ),
            ),
        ),
    ),
    (("fetch", "mcp-server-fetch"), (("network", ("*",)),)),
    (("time", "mcp-server-time"), (("time", ("*",)),)),
    (
        ("everything", "server-everything"),
        (
            ("compute", _EVERYTHING_COMPUTE),
            # they print the server's environment, secrets included
            ("system_execute", ("get-env", "printEnv")),
            # they download the URL they are given before compressing it
            ("network", ("gzip-file-as-resource", "zip")),
        ),
    ),
    (
        ("sequential-thinking", "sequentialthinking", "server-sequential-thinking"),
        (("compute", ("*",)),),
    ),
    (
        ("shell", "terminal", "commands", "command", "bash", "cmd", "mcp-shell"),
        (("system_execute", ("*",)),),
    ),
    (
        ("sqlite", "mcp-server-sqlite"),
        (
            ("file_read", ("read_query", "list_tables", "describe_table")),
            ("file_write", ("write_query", "create_table")),
            ("memory_write", ("append_insight",)),
        ),
    ),
    (("brave-search", "brave", "server-brave-search"), (("web_search", ("*",)),)),
    (
        ("puppeteer", "playwright", "browser", "server-puppeteer", "browsermcp"),
        (("browser", ("*",)),),
    ),
    (("screen", "screenshot", "screen-capture"), (("screen_read", ("*",)),)),
    (("pml",), (("meta", ("pml_*", "cap_*")),)),
    (("*",), (("web_search", ("*web_search*", "*web-search*")),)),
)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: str
    capability: PermissionCapability
    source: Source
    server: re.Pattern[str]
    tool: re.Pattern[str]

    def matches(self, server: str, tool: str) -> bool:
        return self.server.match(server) is not None and self.tool.match(tool) is not None


def _glob(glob: str) -> re.Pattern[str]:
    return re.compile(translate(glob))


def _rule(pattern: str, capability: PermissionCapability, source: Source) -> _Rule:
    server, _, tool = pattern.partition(":")
    return _Rule(pattern, capability, source, _glob(server), _glob(tool))


def _default_rules() -> tuple[list[_Rule], dict[str, list[_Rule]], list[_Rule]]:
    """All default rules in order, the per-server index, and the every-server rules."""
    ordered: list[_Rule] = []
    by_server: dict[str, list[_Rule]] = {}
    everywhere: list[_Rule] = []
    for servers, mappings in DEFAULT_GROUPS:
        for server in servers:
            for capability, tools in mappings:
                for tool in tools:
                    rule = _rule(f"{server}:{tool}", capability, "default")
                    ordered.append(rule)
                    if server == "*":
                        everywhere.append(rule)
                    else:
                        by_server.setdefault(server, []).append(rule)
    return ordered, by_server, everywhere


_DEFAULTS, _DEFAULTS_BY_SERVER, _DEFAULTS_EVERYWHERE = _default_rules()


def validate_pattern(key: object) -> str:
    """``key`` if it is ``server:tool`` shaped (two non-empty globs around one ``:``)."""
    if isinstance(key, str):
        server, sep, tool = key.partition(":")
        if sep and server and tool and ":" not in tool:
            return key
    raise ConfigError(
        f'[policy.capabilities] pattern "{message_value(key)}" is not "server:tool" '
        '(two non-empty globs separated by one ":", e.g. "fs:read_*")',
        key=message_value(key),
    )


class CapabilityMap:
    """The capability of every ``(server, tool)``: configured patterns, defaults, ``unknown``."""

    def __init__(
        self,
        patterns: dict[str, PermissionCapability] | None = None,
        *,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._config: list[_Rule] = []
        for key, capability in (patterns or {}).items():
            pattern = validate_pattern(key)
            if capability not in CAPABILITIES:
                raise ConfigError(
                    f'[policy.capabilities] "{message_value(key)}": unknown capability '
                    f'"{message_value(capability)}" (one of {", ".join(CAPABILITIES)})',
                    key=message_value(key),
                )
            self._config.append(_rule(pattern, capability, "config"))
        self._cache_size = max(cache_size, 0)
        self._cache: dict[tuple[str, str], PermissionCapability] = {}
        self._fingerprint = _fingerprint([*self._config, *_DEFAULTS])

    @classmethod
    def from_settings(cls, policy: PolicySettings) -> CapabilityMap:
        """The map of ``[policy.capabilities]`` over the built-in defaults."""
        return cls(dict(policy.capabilities))

    def capability_of(self, server: str, tool: str) -> PermissionCapability:
        """The one capability ``server``'s tool ``tool`` needs (``"unknown"`` if unmapped)."""
        if not isinstance(server, str) or not isinstance(tool, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidInput(
                f"server and tool must be strings, not {type(server).__name__} "
                f"and {type(tool).__name__}",
                field="tool",
            )
        key = (server, tool)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        capability = self._match(server, tool)
        if self._cache_size and len(server) + len(tool) <= _CACHED_NAME_CHARS:
            if len(self._cache) >= self._cache_size:
                del self._cache[next(iter(self._cache))]  # the oldest entry
            self._cache[key] = capability
        return capability

    @property
    def cached(self) -> int:
        """How many ``(server, tool)`` answers the cache holds."""
        return len(self._cache)

    def capability_of_ref(self, tool_ref: str) -> PermissionCapability:
        """The capability of a tool reference (``server:tool``, ``server__tool``, an FQDN...);
        ``"unknown"`` when it names no tool."""
        parts = tool_ref_parts(tool_ref)
        return "unknown" if parts is None else self.capability_of(*parts)

    def _match(self, server: str, tool: str) -> PermissionCapability:
        for rule in self._config:
            if rule.matches(server, tool):
                return rule.capability
        for rule in _DEFAULTS_BY_SERVER.get(server, ()):
            if rule.tool.match(tool) is not None:
                return rule.capability
        for rule in _DEFAULTS_EVERYWHERE:
            if rule.tool.match(tool) is not None:
                return rule.capability
        return "unknown"

    def describe(self) -> list[dict[str, str]]:
        """The effective patterns in matching order (configured ones first), for docs and CLI.

        Each entry is ``{"pattern": "fs:read_*", "capability": "file_read", "source":
        "config" | "default"}``; a tool no pattern matches is ``unknown``.
        """
        return [
            {"pattern": rule.pattern, "capability": rule.capability, "source": rule.source}
            for rule in (*self._config, *_DEFAULTS)
        ]

    def fingerprint(self) -> str:
        """A stable hash of the effective mapping (16 hex characters), part of the policy
        version: it changes when a configured pattern or a built-in default changes."""
        return self._fingerprint


def _fingerprint(rules: list[_Rule]) -> str:
    rows = [[rule.pattern, rule.capability, rule.source] for rule in rules]
    encoded = json.dumps(rows, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]
