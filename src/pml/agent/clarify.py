"""One clarifying question when a route is unsure or the executor asks for a withheld tool.

    request, asked = await clarify_route(enforcer, request, person, mode="ask", min_confidence=0.65)
    request, asked = await clarify_withheld(enforcer, request, person, refused, mode="ask")

The person is asked what the request is, from the intents in plain words (or "none of
these"); the answer re-decides the request through the enforcement point (``begin_as``,
``decided_by="person:clarified"``). No answer, or ``[agent] on_unclear = "read_only"``: an
unsure request goes on with the read-only row, a withheld tool stays withheld. Every case is
audited (``AGENT_CLARIFICATION``). A question is asked at most once per turn by the caller.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pml.agent.model import Person
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.policy.gate import DEFAULT_INTENT_POLICIES
from pml.policy.intent_rules import INTENT_RISK
from pml.policy.model import FALLBACK_INTENT, RouterOutput

NONE_OF_THESE: Final = "none of these (go on read-only)"
INTENT_WORDS: Final[dict[str, str]] = {
    "chat_only": "just talk, no tools",
    "lookup_search": "search the web for current information",
    "browse_once": "read one web page",
    "one_shot_discovery": "research on the web",
    "screen_observe": "look at my screen",
    "file_task": "read, list or search my files",
    "file_edit": "create, change or delete my files",
    "system_task": "run a command or program",
    "memory_read": "recall what I asked you to remember",
    "memory_write": "remember or forget something",
    "edit_task": "change files or stored facts",
    "general": "answer with read-only tools",
}
OnUnclear = Literal["ask", "read_only"]


def unclear(router: RouterOutput, min_confidence: float) -> bool:
    """Whether a route is too unsure to act on without asking (a prefix or a person is sure)."""
    decided = router.decided_by
    if decided.startswith(("prefix:", "person:", "direct")):
        return False
    return router.confidence < min_confidence


async def clarify_route(
    enforcer: PolicyEnforcer,
    request: RequestPolicy,
    person: Person,
    *,
    mode: OnUnclear,
    min_confidence: float,
) -> tuple[RequestPolicy, dict[str, Any] | None]:
    """The request, re-decided when it was unclear (see module), and what was asked."""
    router = request.router
    if not unclear(router, min_confidence):
        return request, None
    question = (
        f"I am not sure what this request is (it looks like {router.intent!r}, confidence "
        f"{router.confidence:.2f}). What is it?"
    )
    choices = [*INTENT_WORDS.values(), NONE_OF_THESE]
    answer = await person.clarify(question, choices) if mode == "ask" else None
    intent = _intent_of(answer)
    if intent is None:
        chosen = RouterOutput(FALLBACK_INTENT, (), "low", router.confidence, "fallback:read-only")
    else:
        chosen = _person_route(intent)
    asked = _audit(enforcer, request, "unclear_intent", question, answer, mode, chosen.intent)
    if intent is None and router.intent == FALLBACK_INTENT:
        return request, asked  # already the read-only row
    again = await enforcer.begin_as(
        request.scope, chosen, source=request.source, request_id=request.request_id
    )
    return again, asked


async def clarify_withheld(
    enforcer: PolicyEnforcer,
    request: RequestPolicy,
    person: Person,
    refused: dict[str, str],
    *,
    mode: OnUnclear,
) -> tuple[RequestPolicy | None, dict[str, Any]]:
    """A new decision when the person says the request is one that allows the withheld
    tool (None: it stays withheld), and what was asked."""
    capability = refused.get("capability", "unknown")
    question = (
        f"The assistant asked for {refused.get('tool')} ({capability}), which this request "
        f"({request.decision.intent}) does not allow. If the request is really one of these, "
        "pick it:"
    )
    fitting = [
        words
        for intent, words in INTENT_WORDS.items()
        if capability in DEFAULT_INTENT_POLICIES[intent].allowed
    ]
    answer = None
    if mode == "ask" and fitting:
        answer = await person.clarify(question, [*fitting, NONE_OF_THESE])
    intent = _intent_of(answer)
    decided = intent or request.decision.intent
    asked = _audit(enforcer, request, "withheld_tool", question, answer, mode, decided)
    asked["tool"] = refused.get("tool")
    if intent is None:
        return None, asked
    again = await enforcer.begin_as(
        request.scope, _person_route(intent), source=request.source, request_id=request.request_id
    )
    return again, asked


def _intent_of(answer: str | None) -> str | None:
    for intent, words in INTENT_WORDS.items():
        if answer == words:
            return intent
    return None


def _person_route(intent: str) -> RouterOutput:
    return RouterOutput(intent, (), INTENT_RISK.get(intent, "low"), 1.0, "person:clarified")


def _audit(
    enforcer: PolicyEnforcer,
    request: RequestPolicy,
    kind: str,
    question: str,
    answer: str | None,
    mode: OnUnclear,
    intent: str,
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "kind": kind,
        "question": question,
        "answer": answer,
        "mode": mode,
        "intent": intent,
    }
    decided_by = "person:clarified" if answer and answer != NONE_OF_THESE else "read-only"
    enforcer.emit(request, "AGENT_CLARIFICATION", details, decided_by)
    return dict(details)
