"""Permission rules and grant checks (SPEC §10.4): pure functions on the tool-call hot path.

    rules = PermissionRules.from_settings(settings.permissions)
    rules.decide("fs", "write_file", "file_write")
    # RuleMatch(decision="deny", rule="permissions.deny[0]:fs:write_*")
    rules.decide("time", "now", "time")
    # RuleMatch(decision="allow", rule="default:allow:time")

    call = CallFacts.of("fs", "write_file", "file_write", {"path": "/data/a.txt"})
    grant, refused = choose_grant(grants, call, now=now, policy_version="3f2a9c01",
                                  principal="erwan", org="acme", project="webapp")

Patterns are ``server:tool`` globs (``fnmatch`` syntax, case-sensitive; ``*`` alone means
every tool of every server). Among the configured patterns that match a call, deny beats ask
beats allow; when none matches, the capability's default decides: ask for
``ASK_BY_DEFAULT``, allow for the rest. A grant covers a call when every one of its fields
agrees (:func:`grant_refusal` says which one does not); path and URL arguments are checked
by :mod:`pml.policy.arguments`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from functools import cached_property
from typing import Any

from pml.errors import ConfigError
from pml.execution.values import args_digest
from pml.policy.arguments import ArgumentFacts, domain_refusal, normalise_path, path_refusal
from pml.policy.model import ASK_BY_DEFAULT, CAPABILITIES, PermissionCapability, PermissionDecision
from pml.policy.tool_patterns import BadPattern, glob_regex, split_pattern, tool_matcher
from pml.sections import PermissionsSettings

RULE_CACHE_SIZE = 4096
GLOB_CHARS = frozenset("*?[")
# Matching runs on "server\0tool": one regex per decision instead of one per pattern.
SEP = "\x00"
DECISIONS: tuple[PermissionDecision, ...] = ("deny", "ask", "allow")


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """What the rules say about a call, and which rule said it."""

    decision: PermissionDecision
    rule: str


DEFAULTS: dict[str, RuleMatch] = {
    capability: RuleMatch(
        "ask" if capability in ASK_BY_DEFAULT else "allow",
        f"default:{'ask' if capability in ASK_BY_DEFAULT else 'allow'}:{capability}",
    )
    for capability in CAPABILITIES
}


class _Alternatives:
    """Globs joined into one regex; ``first`` is the index of the first one that matches."""

    __slots__ = ("_indices", "_regex")

    def __init__(self, entries: list[tuple[int, str]]) -> None:
        self._regex = re.compile("|".join(f"({source})" for _, source in entries), re.S)
        self._indices = [index for index, _ in entries]

    def first(self, text: str) -> int | None:
        match = self._regex.fullmatch(text)
        return None if match is None else self._indices[(match.lastindex or 1) - 1]


class _Compiled:
    """The patterns of one decision, indexed three ways: exact ``server:tool`` strings,
    tool globs grouped by literal server, and one regex for the globbed servers."""

    __slots__ = ("every", "exact", "globbed", "servers")

    def __init__(self, decision: str, patterns: Sequence[str]) -> None:
        self.exact: dict[str, int] = {}
        self.every: list[tuple[int, str, str]] = []
        by_server: dict[str, list[tuple[int, str]]] = {}
        globbed: list[tuple[int, str]] = []
        for index, pattern in enumerate(patterns):
            try:
                server, tool = split_pattern(pattern)
            except BadPattern as error:
                raise ConfigError(
                    f"Invalid permission pattern permissions.{decision}[{index}]: {error}",
                    field=f"permissions.{decision}",
                ) from None
            server_re, tool_re = glob_regex(server), glob_regex(tool)
            self.every.append((index, server, tool))
            if not GLOB_CHARS.isdisjoint(server):
                globbed.append((index, f"{server_re}{SEP}{tool_re}"))
            elif not GLOB_CHARS.isdisjoint(tool):
                by_server.setdefault(server, []).append((index, tool_re))
            else:
                self.exact.setdefault(f"{server}{SEP}{tool}", index)
        self.servers = {server: _Alternatives(entries) for server, entries in by_server.items()}
        self.globbed = _Alternatives(globbed) if globbed else None

    def first(self, server: str, tool: str) -> int | None:
        """The lowest index of a pattern matching ``server:tool``."""
        if SEP in server or SEP in tool:  # the joined key would be ambiguous: one by one
            hits = (i for i, s, t in self.every if fnmatchcase(server, s) and fnmatchcase(tool, t))
            return next(hits, None)
        key = f"{server}{SEP}{tool}"
        by_server = self.servers.get(server)
        found = (
            self.exact.get(key),
            by_server.first(tool) if by_server is not None else None,
            self.globbed.first(key) if self.globbed is not None else None,
        )
        return min((index for index in found if index is not None), default=None)


class PermissionRules:
    """The ``[permissions]`` allow/ask/deny patterns, compiled once, with a per-tool cache."""

    def __init__(
        self,
        *,
        allow: Sequence[str] = (),
        ask: Sequence[str] = (),
        deny: Sequence[str] = (),
        cache_size: int = RULE_CACHE_SIZE,
    ) -> None:
        given = {"deny": list(deny), "ask": list(ask), "allow": list(allow)}
        self._patterns = given
        self._compiled = {decision: _Compiled(decision, given[decision]) for decision in DECISIONS}
        self._lookup = functools.lru_cache(maxsize=cache_size)(self._configured)

    @classmethod
    def from_settings(cls, settings: PermissionsSettings) -> PermissionRules:
        """The rules of a ``[permissions]`` section; a bad pattern is a ``ConfigError``."""
        return cls(allow=settings.allow, ask=settings.ask, deny=settings.deny)

    def decide(self, server: str, tool: str, capability: PermissionCapability) -> RuleMatch:
        """Allow, ask or deny for one call, naming the configured rule or the default.

        A capability outside ``CAPABILITIES`` gets the default of ``unknown`` (ask).
        """
        matched = self._lookup(str(server), str(tool))
        if matched is not None:
            return matched
        return DEFAULTS.get(capability) or DEFAULTS["unknown"]

    def _configured(self, server: str, tool: str) -> RuleMatch | None:
        for decision in DECISIONS:
            index = self._compiled[decision].first(server, tool)
            if index is not None:
                pattern = self._patterns[decision][index]
                return RuleMatch(decision, f"permissions.{decision}[{index}]:{pattern}")
        return None


@dataclass(frozen=True, slots=True)
class GrantScope:
    """What a grant reaches: tools matching ``tool``, paths under ``path_prefix``, URLs of
    ``domain`` and its subdomains (None: no restriction of that kind)."""

    tool: str = "*:*"
    path_prefix: str | None = None
    domain: str | None = None

    def covers_tool(self, server: str, tool: str) -> bool:
        """Whether ``server:tool`` matches the pattern (a malformed stored pattern: never)."""
        matcher = tool_matcher(self.tool)
        return (
            matcher is not None
            and matcher[0].fullmatch(server) is not None
            and matcher[1].fullmatch(tool) is not None
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in the ``scope`` column."""
        return {"tool": self.tool, "path_prefix": self.path_prefix, "domain": self.domain}

    @classmethod
    def from_dict(cls, data: object) -> GrantScope:
        """Read back a stored scope; anything malformed becomes a scope that covers nothing."""
        nothing = cls(tool="")  # an empty pattern matches no tool
        if not isinstance(data, Mapping):
            return nothing
        values: Mapping[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
        tool, prefix, domain = values.get("tool"), values.get("path_prefix"), values.get("domain")
        if not isinstance(tool, str):
            return nothing
        if not (prefix is None or isinstance(prefix, str)):
            return nothing
        if not (domain is None or isinstance(domain, str)):
            return nothing
        if prefix is not None:  # compared as normalised, once here rather than per call
            prefix = normalise_path(prefix)
        return cls(tool=tool, path_prefix=prefix, domain=domain)


@dataclass(frozen=True, slots=True)
class Grant:
    """A permission token (SPEC §10.4): who may use which capability, where, how often."""

    id: str
    principal: str
    org: str
    project: str
    capability: PermissionCapability
    scope: GrantScope
    purpose: str | None
    issued_at: datetime
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    args_digest: str | None
    policy_version: str
    revoked: bool
    revoked_at: datetime | None = None

    def active(self, now: datetime) -> bool:
        """Not revoked, not expired and not used up at ``now``."""
        return not (self.revoked or _expired(self, now) or _used_up(self))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, times in ISO 8601."""
        return {
            "id": self.id,
            "principal": self.principal,
            "org": self.org,
            "project": self.project,
            "capability": self.capability,
            "scope": self.scope.to_dict(),
            "purpose": self.purpose,
            "issued_at": self.issued_at.isoformat(),
            "expires_at": _iso(self.expires_at),
            "max_uses": self.max_uses,
            "uses": self.uses,
            "args_digest": self.args_digest,
            "policy_version": self.policy_version,
            "revoked": self.revoked,
            "revoked_at": _iso(self.revoked_at),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _expired(grant: Grant, now: datetime) -> bool:
    return grant.expires_at is not None and grant.expires_at <= now


def _used_up(grant: Grant) -> bool:
    return grant.max_uses is not None and grant.uses >= grant.max_uses


@dataclass(frozen=True, eq=False)
class CallFacts:
    """One tool call as grants see it; ``digest`` is ``args_digest(arguments)``."""

    server: str
    tool: str
    capability: PermissionCapability
    arguments: Mapping[str, Any]
    digest: str

    @classmethod
    def of(
        cls,
        server: str,
        tool: str,
        capability: PermissionCapability,
        arguments: Mapping[str, Any],
    ) -> CallFacts:
        """The facts of a call, its digest computed like the traces' ``args_digest``."""
        return cls(server, tool, capability, arguments, args_digest(arguments))

    @cached_property
    def argument_facts(self) -> ArgumentFacts:
        """Path and URL arguments, collected once however many grants are checked."""
        return ArgumentFacts.collect(self.arguments)


def grant_refusal(
    grant: Grant,
    call: CallFacts,
    *,
    now: datetime,
    policy_version: str,
    principal: str,
    org: str,
    project: str,
) -> str | None:
    """None when ``grant`` covers ``call`` for this principal, else a short reason."""
    if grant.revoked:
        return "revoked"
    if grant.org != org or grant.project != project:
        return "other tenant"
    if grant.principal != principal:
        return "other principal"
    if _expired(grant, now):
        return "expired"
    if _used_up(grant):
        return f"used up ({grant.uses}/{grant.max_uses})"
    if grant.capability != call.capability:
        return f"other capability ({grant.capability})"
    if grant.policy_version != policy_version:
        return f"other policy version ({grant.policy_version})"
    if not grant.scope.covers_tool(call.server, call.tool):
        return f"tool outside {grant.scope.tool}"
    if grant.args_digest is not None and grant.args_digest != call.digest:
        return "arguments differ from the approved call"
    if grant.scope.path_prefix is not None:
        refused = path_refusal(call.argument_facts, grant.scope.path_prefix)
        if refused is not None:
            return refused
    if grant.scope.domain is not None:
        return domain_refusal(call.argument_facts, grant.scope.domain)
    return None


def _specificity(grant: Grant) -> tuple[bool, bool]:
    return grant.args_digest is None, grant.max_uses is None


def choose_grant(
    grants: Iterable[Grant],
    call: CallFacts,
    *,
    now: datetime,
    policy_version: str,
    principal: str,
    org: str,
    project: str,
) -> tuple[Grant | None, list[str]]:
    """The most specific grant covering ``call``, and ``"<id>: <reason>"`` for the grants
    refused before it (all of them when none covers the call).

    Digest-bound grants are tried first, then limited-use ones, then the rest, each group
    in the given order, so a one-off approval is spent before a standing one.
    """
    refused: list[str] = []
    for grant in sorted(grants, key=_specificity):
        reason = grant_refusal(
            grant,
            call,
            now=now,
            policy_version=policy_version,
            principal=principal,
            org=org,
            project=project,
        )
        if reason is None:
            return grant, refused
        refused.append(f"{grant.id}: {reason}")
    return None, refused
