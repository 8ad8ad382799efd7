"""The policy gate: a pure function from a request's ``RouterOutput`` to what it may use.

    gate = PolicyGate(settings.policy, version="3f2a9c01ab12")
    decision = gate.evaluate(router_output)       # PolicyDecision, cached per intent
    gate.forbidding_rule(decision, "filesystem", "write_file", "file_write")
    # -> "policy:file_task forbids file_write"   (None when the call may go on)

Each intent has one row: ``allowed`` capabilities (what the intent is expected to use),
``forbidden`` capabilities (what contradicts it; ``"*"`` for everything) and ``exceptions``
(``server:tool`` globs permitted whatever their capability). A call whose capability is
forbidden is refused (``POLICY_DENIED``); every other call goes on to the permission rules
(SPEC §10.4), which is where ``unknown`` tools and risky capabilities ask for approval.
``[policy.intents.<name>]`` replaces a built-in row; an intent the table does not know gets
the ``general`` row (read-only). The gate never does I/O and never guesses: what it cannot
evaluate it refuses (the caller turns any error into a denial).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Final

from pml.config import IntentPolicySettings, PolicySettings
from pml.policy.model import CAPABILITIES, FALLBACK_INTENT, PolicyDecision, RouterOutput

_READS: Final = ("time", "compute", "meta")
_WEB: Final = ("web_search", "network", "browser")


def _row(allowed: tuple[str, ...], forbidden: tuple[str, ...]) -> IntentPolicySettings:
    return IntentPolicySettings.model_validate({"allowed": allowed, "forbidden": forbidden})


# The built-in policy table (seed 002, phase 2.2, adapted to PML's capabilities).
DEFAULT_INTENT_POLICIES: Final[dict[str, IntentPolicySettings]] = {
    "chat_only": _row((), ("*",)),
    "lookup_search": _row(
        ("web_search", "network", *_READS),
        ("file_read", "file_write", "system_execute", "memory_write", "screen_read"),
    ),
    "browse_once": _row(
        ("browser", "network", *_READS),
        ("file_read", "file_write", "system_execute", "memory_write", "screen_read"),
    ),
    "one_shot_discovery": _row(
        (*_WEB, "memory_read", *_READS),
        ("file_read", "file_write", "system_execute", "memory_write", "screen_read"),
    ),
    "screen_observe": _row(
        ("screen_read", *_READS),
        (*_WEB, "file_read", "file_write", "system_execute", "memory_write"),
    ),
    "file_task": _row(
        ("file_read", *_READS),
        (*_WEB, "file_write", "system_execute", "memory_write", "screen_read"),
    ),
    "file_edit": _row(
        ("file_read", "file_write", *_READS),
        (*_WEB, "system_execute", "memory_write", "screen_read"),
    ),
    "system_task": _row(
        ("system_execute", "file_read", "file_write", *_READS),
        ("browser", "memory_write", "screen_read"),
    ),
    "memory_read": _row(
        ("memory_read", *_READS),
        (*_WEB, "memory_write", "file_write", "system_execute", "screen_read"),
    ),
    "memory_write": _row(
        ("memory_read", "memory_write", *_READS),
        (*_WEB, "file_write", "system_execute", "screen_read"),
    ),
    # A change of files or memory that names neither clearly ("save Globex as a customer").
    "edit_task": _row(
        ("file_read", "file_write", "memory_read", "memory_write", *_READS),
        (*_WEB, "system_execute", "screen_read"),
    ),
    # The fallback: a minimal read-only allowance; unknown tools still go to permissions.
    FALLBACK_INTENT: _row(
        ("file_read", "memory_read", *_READS),
        (*_WEB, "file_write", "system_execute", "memory_write", "screen_read"),
    ),
}


class PolicyGate:
    """Evaluates the policy table (built-in rows, replaced per intent by configuration)."""

    def __init__(self, settings: PolicySettings, *, version: str) -> None:
        self._version = version
        self._rows: dict[str, tuple[IntentPolicySettings, str]] = {
            intent: (row, f"policy:{intent}") for intent, row in DEFAULT_INTENT_POLICIES.items()
        }
        for intent, row in settings.intents.items():
            self._rows[intent] = (row, f"config:policy.intents.{intent}")
        self._cache: dict[tuple[str, tuple[str, ...]], PolicyDecision] = {}

    @property
    def version(self) -> str:
        """The policy version grants are issued under (a hash of the policy settings)."""
        return self._version

    def evaluate(self, router: RouterOutput) -> PolicyDecision:
        """The decision for one request: its intent's row, with ``needs`` it does not forbid."""
        key = (router.intent, router.needs)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        row, rule = self._rows.get(router.intent) or self._rows[FALLBACK_INTENT]
        forbidden = frozenset(row.forbidden)
        if "*" in forbidden:
            forbidden = frozenset({"*", *CAPABILITIES})
        needed = frozenset(router.needs) - forbidden
        decision = PolicyDecision(
            intent=router.intent if router.intent in self._rows else FALLBACK_INTENT,
            allowed=frozenset(row.allowed) - forbidden | needed,
            forbidden=forbidden,
            exceptions=tuple(row.exceptions),
            policy_version=self._version,
            rule=rule,
        )
        if len(self._cache) < 4096:
            self._cache[key] = decision
        return decision

    @staticmethod
    def forbidding_rule(
        decision: PolicyDecision, server: str, tool: str, capability: str
    ) -> str | None:
        """The rule that forbids ``server:tool`` (of ``capability``), or None if it may go on."""
        if capability not in decision.forbidden and "*" not in decision.forbidden:
            return None
        address = f"{server}:{tool}"
        for pattern in decision.exceptions:
            if fnmatchcase(address, pattern):
                return None
        return f"{decision.rule} forbids {capability}"
