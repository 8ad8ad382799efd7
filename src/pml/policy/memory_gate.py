"""Memory writes at the enforcement point: sensitivity decides who consents (SPEC §13).

    gate = MemoryGate(settings.memory)
    verdict = await gate.verdict("create_entities", {"entities": [...]})
    # MemoryVerdict(level="low", ...): stored without asking (audited POSTHOOK_MEMORY)

A call of a ``memory_write`` tool (the memory server's ``create_entities`` ...) is classified
by what it would store (``pml.memory.sensitivity``: the heuristics, raised by the ``[llm]``
model when ``[memory] llm_classify`` — at most ``LLM_TIMEOUT_S``, then the heuristics stand;
verdicts are cached, so a write checked again asks the model once):

- ``credential``: refused whatever the rules and grants say: a secret is never stored;
- ``high`` (personal data, health, finance, contacts ...) and deletions: a person consents —
  the call asks even when a rule would allow it, and only a grant a person issued lets it go
  (for ``pml agent``, the consent given at the terminal is a one-call grant);
- ``low`` (preferences, project facts): where the rules would ask, it is stored without
  asking when ``[memory] auto_store = "low"`` (the default); a ``deny`` rule still refuses.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from pml.llm import JsonCompleter
from pml.memory.sensitivity import MemoryVerdict, classify, classify_text, memory_text
from pml.sections_agent import MemorySettings

LOW_CONSENT: Final = "memory:low-sensitivity"
CREDENTIAL_RULE: Final = "memory:credential"
SENSITIVE_RULE: Final = "memory:sensitive"
CACHE_SIZE: Final = 512  # verdicts kept (a write is checked again when a person's grant lets it go)
LLM_TIMEOUT_S: Final = 5.0
_DELETING: Final = ("delete", "remove", "forget", "clear", "purge", "drop")


class MemoryGate:
    """Classifies memory writes for the enforcer (see module)."""

    def __init__(
        self,
        settings: MemorySettings,
        *,
        llm: JsonCompleter | None = None,
        model: str = "llm",
        timeout_s: float = LLM_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        self._llm = llm
        self._model = model
        self._timeout_s = timeout_s
        self._cache: OrderedDict[str, MemoryVerdict] = OrderedDict()

    @property
    def auto_store_low(self) -> bool:
        return self.settings.auto_store == "low"

    async def verdict(self, tool: str, arguments: Mapping[str, Any]) -> MemoryVerdict:
        """How sensitive the write ``tool(arguments)`` is (a deletion needs a person)."""
        text = memory_text(arguments)
        key = hashlib.sha256(f"{tool}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        llm = self._llm if self.settings.llm_classify else None
        if llm is None:
            found = classify_text(text)
        else:
            found = await classify(text, llm, model=self._model, timeout_s=self._timeout_s)
        if found.level == "low" and tool.casefold().startswith(_DELETING):
            found = MemoryVerdict("high", ("deletes remembered facts",), found.decided_by)
        self._cache[key] = found
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
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


def write_details(
    verdict: MemoryVerdict, address: str, outcome: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """``memory_details`` of a memory tool's call (its text from its arguments)."""
    return memory_details(verdict, address, outcome, text=memory_text(arguments))
