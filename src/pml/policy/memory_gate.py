"""Memory writes at the enforcement point: sensitivity decides who consents (SPEC §13).

    gate = MemoryGate(settings.memory)
    verdict = gate.verdict("create_entities", {"entities": [...]})
    # MemoryVerdict(level="low", ...): stored without asking (audited POSTHOOK_MEMORY)

A call of a ``memory_write`` tool (the memory server's ``create_entities`` ...) is classified
by what it would store (``pml.memory.sensitivity``, heuristics only here: the hot path never
waits for a model):

- ``credential``: refused whatever the rules and grants say: a secret is never stored;
- ``high`` (personal data, health, finance, contacts ...) and deletions: a person consents —
  the call asks even when a rule would allow it, and only a grant a person issued lets it go
  (for ``pml agent``, the consent given at the terminal is a one-call grant);
- ``low`` (preferences, project facts): where the rules would ask, it is stored without
  asking when ``[memory] auto_store = "low"`` (the default); a ``deny`` rule still refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pml.memory.sensitivity import MemoryVerdict, classify_text, memory_text
from pml.sections_agent import MemorySettings

LOW_CONSENT: Final = "memory:low-sensitivity"
CREDENTIAL_RULE: Final = "memory:credential"
SENSITIVE_RULE: Final = "memory:sensitive"
_DELETING: Final = ("delete", "remove", "forget", "clear", "purge", "drop")


class MemoryGate:
    """Classifies memory writes for the enforcer (see module)."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings

    @property
    def auto_store_low(self) -> bool:
        return self.settings.auto_store == "low"

    def verdict(self, tool: str, arguments: Mapping[str, Any]) -> MemoryVerdict:
        """How sensitive the write ``tool(arguments)`` is (a deletion needs a person)."""
        found = classify_text(memory_text(arguments))
        if found.level == "low" and tool.casefold().startswith(_DELETING):
            return MemoryVerdict("high", ("deletes remembered facts",), "heuristic")
        return found


def memory_details(
    verdict: MemoryVerdict, target: str, outcome: str, *, text: str | None = None
) -> dict[str, Any]:
    """A ``POSTHOOK_MEMORY`` event's details; the text itself only for a low-sensitivity
    fact (a sensitive one is never copied into the audit log)."""
    details: dict[str, Any] = {
        "target": target,
        "outcome": outcome,
        "sensitivity": verdict.level,
        "reasons": list(verdict.reasons)[:5],
        "classified_by": verdict.decided_by,
    }
    if text is not None:
        details["chars"] = len(text)
        if verdict.level == "low":
            details["text"] = text[:200]
    return details
