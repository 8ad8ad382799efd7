"""The memory post-hook: a turn's memory proposals, applied after the turn (SPEC §13).

    hook = MemoryPostHook(store, enforcer, pool, grant, settings.memory, llm=llm)
    outcomes = await hook.apply(request, ledger.proposals, person)
    # [{"target": "pml", "sensitivity": "low", "outcome": "applied", ...}, ...]

Each proposal is classified (``pml.memory.sensitivity.classify``: heuristics, raised by the
``[llm]`` model when ``[memory] llm_classify``):

- ``credential``: refused, never stored, never asked about;
- ``low``: stored without asking when ``[memory] auto_store = "low"`` (else as ``high``);
- ``high``: the person is asked; a refusal stores nothing.

PML's own memory (``pml_remember``, a "remember ..." request) is the ``memories`` table; a
memory server's write tool is called through the enforcement point, a person's consent
being a one-call grant. Every outcome is audited (``POSTHOOK_MEMORY``); the text of a
sensitive fact is never copied into the audit log.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from pml.agent.dispatch import MemoryProposal
from pml.agent.model import ConsentAsk, Decision, Person
from pml.errors import ApprovalRequired, PmlError
from pml.llm import JsonCompleter
from pml.memory.sensitivity import MemoryVerdict, classify
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.policy.memory_gate import LOW_CONSENT, memory_details
from pml.sections_agent import MemorySettings
from pml.upstream.base import UpstreamPool

if TYPE_CHECKING:
    from pml.memory.store import MemoryStore

MAX_PROPOSALS: Final = 20
PERSON: Final = "terminal:pml agent"
AUTO: Final = "posthook:low-sensitivity"
_REMEMBER = re.compile(
    r"^\s*(?:please\s+|pls\s+|can you\s+|could you\s+)?"
    r"(?:remember|memori[sz]e|note|keep in mind|don'?t forget|do not forget|save)\b"
    r"(?:\s+(?:that|this|:))?\s*[:,-]?\s*",
    re.IGNORECASE,
)

Grant = Callable[[dict[str, Any], Decision], Awaitable[None]]


def remembered_fact(text: str) -> str | None:
    """What a "remember ..." request asks to keep (the text without its request words), or
    None when the request does not start by asking to remember something."""
    found = _REMEMBER.match(text)
    if found is None:
        return None
    fact = text[found.end() :].strip().rstrip(" .!")
    return fact or None


class MemoryPostHook:
    """Applies memory proposals with the consent their sensitivity needs (see module)."""

    def __init__(
        self,
        store: MemoryStore,
        enforcer: PolicyEnforcer,
        pool: UpstreamPool,
        grant: Grant,
        settings: MemorySettings,
        *,
        llm: JsonCompleter | None = None,
        model: str = "llm",
    ) -> None:
        self._store = store
        self._enforcer = enforcer
        self._pool = pool
        self._grant = grant
        self._settings = settings
        self._llm = llm if settings.llm_classify else None
        self._model = model

    async def apply(
        self, request: RequestPolicy, proposals: list[MemoryProposal], person: Person
    ) -> list[dict[str, Any]]:
        """Every proposal's outcome, in order (duplicates and those beyond 20 are skipped)."""
        outcomes: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for proposal in proposals:
            key = (proposal.target, proposal.text)
            if key in seen:
                continue
            seen.add(key)
            if len(outcomes) >= MAX_PROPOSALS:
                outcomes.append({"target": proposal.target, "outcome": "skipped"})
                continue
            outcomes.append(await self._one(request, proposal, person))
        return outcomes

    async def _one(
        self, request: RequestPolicy, proposal: MemoryProposal, person: Person
    ) -> dict[str, Any]:
        verdict = await classify(proposal.text, self._llm, model=self._model)
        if verdict.level == "credential":
            return self._audit(request, proposal, verdict, "refused", "memory:credential")
        consented: str | None = None
        if verdict.level == "high" or self._settings.auto_store != "low":
            ask = ConsentAsk(proposal.text, _target_words(proposal.target), verdict.reasons)
            if not await person.consent(ask):
                return self._audit(request, proposal, verdict, "declined", PERSON)
            consented = PERSON
        try:
            if proposal.target == "pml":
                fact, _ = await self._store.add(
                    request.scope,
                    proposal.text,
                    sensitivity=verdict.level,
                    source="agent",
                    request_id=request.request_id,
                    max_facts=self._settings.max_facts,
                )
                outcome = self._audit(request, proposal, verdict, "applied", consented or AUTO)
                return {**outcome, "id": fact.id}
            return await self._call_server(request, proposal, verdict, consented)
        except PmlError as error:
            outcome = self._audit(request, proposal, verdict, "failed", error.code)
            return {**outcome, "error": error.message[:300]}

    async def _call_server(
        self,
        request: RequestPolicy,
        proposal: MemoryProposal,
        verdict: MemoryVerdict,
        consented: str | None,
    ) -> dict[str, Any]:
        assert proposal.server is not None
        assert proposal.tool is not None
        server, tool, arguments = proposal.server, proposal.tool, proposal.arguments or {}
        try:
            decided_by = await self._enforcer.authorize(request, server, tool, arguments)
        except ApprovalRequired as waiting:
            if consented is None:  # the rules ask although the fact looked harmless
                return self._audit(request, proposal, verdict, "waiting", str(waiting.message))
            call = {
                "tool": proposal.target,
                "capability": waiting.data.get("capability"),
                "args_digest": waiting.data.get("args_digest"),
            }
            await self._grant(call, "once")
            decided_by = await self._enforcer.authorize(request, server, tool, arguments)
        self._enforcer.tool_call_started(request, proposal.target)
        ok = False
        try:
            result = await self._pool.call_tool(server, tool, arguments)
            ok = not result.is_error
        finally:
            self._enforcer.tool_call_ended(
                request, proposal.target, ok=ok, duration_ms=0.0, replayed=False
            )
        outcome = "applied" if ok else "failed"
        if decided_by == LOW_CONSENT and ok:  # the enforcement point audited it already
            return _summary(proposal, verdict, outcome, decided_by)
        return self._audit(request, proposal, verdict, outcome, consented or decided_by)

    def _audit(
        self,
        request: RequestPolicy,
        proposal: MemoryProposal,
        verdict: MemoryVerdict,
        outcome: str,
        decided_by: str,
    ) -> dict[str, Any]:
        details = memory_details(verdict, proposal.target, outcome, text=proposal.text)
        details["origin"] = proposal.origin
        self._enforcer.emit(request, "POSTHOOK_MEMORY", details, decided_by)
        return _summary(proposal, verdict, outcome, decided_by)


def _summary(
    proposal: MemoryProposal, verdict: MemoryVerdict, outcome: str, decided_by: str
) -> dict[str, Any]:
    return {
        "target": proposal.target,
        "origin": proposal.origin,
        "sensitivity": verdict.level,
        "reasons": list(verdict.reasons)[:5],
        "outcome": outcome,
        "decided_by": decided_by,
    }


def _target_words(target: str) -> str:
    return "PML's memory" if target == "pml" else f"the memory server ({target})"
