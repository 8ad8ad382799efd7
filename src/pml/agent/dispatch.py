"""Calling the tools a turn offered: the one enforcement point, a person for approvals.

    runner = ToolRunner(parts, offer=offer, request=request, text=turn_text, person=person,
                        ledger=ledger, result_chars=12_000)
    outcome = await runner.call(ToolCall("call_1", "time__get_current_time", '{"timezone": "UTC"}'))
    outcome.content      # what the model is told (bounded)

- A name the turn did not offer is refused (``EXECUTOR_TOOL_REFUSED``): a withheld tool with
  the rule that withholds it, anything else as unknown. Arguments must be one JSON object of
  at most ``MAX_ARGUMENT_BYTES``.
- Upstream tools go through ``PolicyEnforcer.authorize`` under the turn's request; an ``ask``
  asks the person (once / session / always / deny) and their choice becomes a grant issued
  by the approval desk, exactly as the approval commands issue it.
- ``pml_execute`` and capability tools run through the execution service with the turn's own
  text as intent; a run that waits for approval asks the person, who decides on the desk,
  and the run resumes.
- ``pml_remember`` and ``memory_write`` tools are never executed here: they become proposals
  for the memory post-hook (``pml.agent.posthook``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

from pml.agent.model import ApprovalAsk, Decision, Person, ToolCall
from pml.agent.offer import OfferedTool, ToolOffer
from pml.errors import ApprovalRequired, PmlError
from pml.memory.sensitivity import memory_text
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.upstream.base import UpstreamPool

MAX_ARGUMENT_BYTES: Final = 256_000
MAX_FACT_CHARS: Final = 2_000
MAX_APPROVAL_ROUNDS: Final = 8
DECIDED_BY: Final = "terminal:pml agent"

Execute = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Decide = Callable[[str, Decision], Awaitable[None]]
Grant = Callable[[dict[str, Any], Decision], Awaitable[None]]
Discover = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(slots=True)
class MemoryProposal:
    """A memory write the turn wants: stored, asked about or refused after the turn."""

    text: str
    target: str  # "pml" (PML's own memory) or "server:tool"
    origin: str  # "executor" (a tool call) or "intent" (the person said "remember ...")
    server: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None


@dataclass(slots=True)
class TurnLedger:
    """What happened during a turn, for its pipeline record."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    asked: list[str] = field(default_factory=list[str])
    granted: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    denied: list[str] = field(default_factory=list[str])
    refused: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    proposals: list[MemoryProposal] = field(default_factory=list[MemoryProposal])


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One call's end: what the model is told, and how it went."""

    name: str
    outcome: str
    content: str
    duration_ms: float = 0.0
    decided_by: str | None = None


@dataclass(frozen=True, slots=True)
class RunnerParts:
    """The gateway services a runner calls."""

    pool: UpstreamPool
    enforcer: PolicyEnforcer
    execute: Execute  # pml_execute's service, for the turn's scope
    decide: Decide  # a person's decision on a paused run (the approval desk)
    grant: Grant  # a person's approval of one call, as the desk issues it
    discover: Discover | None = None
    covers: Callable[[str], Mapping[str, str]] | None = None  # what each grant would cover


class ToolRunner:
    """Runs the executor's tool calls for one turn (see module)."""

    def __init__(
        self,
        parts: RunnerParts,
        *,
        offer: ToolOffer,
        request: RequestPolicy,
        text: str,
        person: Person,
        ledger: TurnLedger,
        result_chars: int,
    ) -> None:
        self._parts = parts
        self._offer = offer
        self._request = request
        self._text = text
        self._person = person
        self._ledger = ledger
        self._result_chars = result_chars

    async def call(self, call: ToolCall) -> ToolOutcome:
        """Run (or refuse, or record) one tool call; never raises a ``PmlError``."""
        started = time.perf_counter()
        tool = self._offer.offered.get(call.name)
        if tool is None:
            outcome = self._refuse_unoffered(call.name)
        else:
            arguments = parse_arguments(call.arguments)
            if isinstance(arguments, str):
                outcome = self._refused(call.name, "invalid_arguments", arguments)
            else:
                try:
                    outcome = await self._run(tool, arguments)
                except PmlError as error:
                    outcome = ToolOutcome(call.name, _outcome_of(error), _error_text(error))
        elapsed = round((time.perf_counter() - started) * 1000, 3)
        self._ledger.tool_calls.append(
            {
                "tool": call.name,
                "outcome": outcome.outcome,
                "duration_ms": elapsed,
                "decided_by": outcome.decided_by,
            }
        )
        content = bounded(outcome.content, self._result_chars)
        return ToolOutcome(outcome.name, outcome.outcome, content, elapsed, outcome.decided_by)

    def _refuse_unoffered(self, name: str) -> ToolOutcome:
        withheld = self._offer.withheld.get(name)
        if withheld is None:
            return self._refused(
                name[:64],
                "unknown",
                f"There is no tool named {name[:64]!r} in this turn: use only the tools offered.",
            )
        self._ledger.refused.append(
            {"tool": name, "capability": withheld.capability, "rule": withheld.rule}
        )
        return self._refused(
            name,
            "withheld",
            f"Refused: {name} ({withheld.capability}) is not allowed for this request "
            f"({withheld.rule}).",
            capability=withheld.capability,
        )

    def _refused(self, name: str, reason: str, message: str, **extra: str) -> ToolOutcome:
        details = {"tool": name, "reason": reason, **extra}
        self._parts.enforcer.emit(self._request, "EXECUTOR_TOOL_REFUSED", details, "agent")
        return ToolOutcome(name, "refused", message)

    async def _run(self, tool: OfferedTool, arguments: dict[str, Any]) -> ToolOutcome:
        if tool.kind == "remember":
            fact = arguments.get("fact")
            if not isinstance(fact, str) or not fact.strip() or len(fact) > MAX_FACT_CHARS:
                return self._refused(
                    tool.name, "invalid_arguments", f"fact must be text of 1-{MAX_FACT_CHARS} chars"
                )
            self._ledger.proposals.append(MemoryProposal(fact.strip(), "pml", "executor"))
            return ToolOutcome(tool.name, "proposed", _PROPOSED)
        if tool.kind == "memory_write":
            self._ledger.proposals.append(
                MemoryProposal(
                    memory_text(arguments),
                    tool.address,
                    "executor",
                    server=tool.server,
                    tool=tool.tool,
                    arguments=arguments,
                )
            )
            return ToolOutcome(tool.name, "proposed", _PROPOSED)
        if tool.kind == "upstream":
            return await self._upstream(tool, arguments)
        if tool.kind == "discover" and self._parts.discover is not None:
            return ToolOutcome(tool.name, "ok", await self._parts.discover(arguments))
        if tool.kind == "capability":
            arguments = {"capability": tool.fqdn, "args": arguments}
        return await self._execute(tool.name, arguments)

    async def _upstream(self, tool: OfferedTool, arguments: dict[str, Any]) -> ToolOutcome:
        assert tool.server is not None
        assert tool.tool is not None
        enforcer, request = self._parts.enforcer, self._request
        try:
            decided_by = await enforcer.authorize(request, tool.server, tool.tool, arguments)
        except ApprovalRequired as waiting:
            data = waiting.data
            choice = await self._ask(
                ApprovalAsk(
                    tool=tool.address,
                    capability=str(data.get("capability") or tool.capability),
                    intent=request.decision.intent,
                    rule=str(data.get("reason") or ""),
                    arguments=cast(list[dict[str, Any]], data.get("arguments") or []),
                    summary=str(data.get("args_summary") or ""),
                    grants=self._parts.covers(tool.address) if self._parts.covers else {},
                )
            )
            if choice == "deny":
                return self._denied_by_person(tool)
            call = {
                "tool": tool.address,
                "capability": data.get("capability"),
                "args_digest": data.get("args_digest"),
            }
            await self._parts.grant(call, choice)
            self._ledger.granted.append({"tool": tool.address, "grant": choice})
            decided_by = await enforcer.authorize(request, tool.server, tool.tool, arguments)
        enforcer.tool_call_started(request, tool.address)
        started = time.perf_counter()
        ok = False
        try:
            result = await self._parts.pool.call_tool(tool.server, tool.tool, arguments)
            ok = not result.is_error
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            enforcer.tool_call_ended(
                request, tool.address, ok=ok, duration_ms=elapsed, replayed=False
            )
        content = result_text(result.content, result.structured_content)
        return ToolOutcome(tool.name, "ok" if ok else "tool_error", content, decided_by=decided_by)

    def _denied_by_person(self, tool: OfferedTool) -> ToolOutcome:
        self._ledger.denied.append(tool.address)
        details = {"tool": tool.address, "capability": tool.capability, "rule": "person"}
        self._parts.enforcer.emit(self._request, "PERMISSION_DENIED", details, DECIDED_BY)
        return ToolOutcome(
            tool.name, "denied", f"The user denied {tool.address}.", decided_by=DECIDED_BY
        )

    async def _ask(self, ask: ApprovalAsk) -> Decision:
        self._ledger.asked.append(ask.tool)
        return await self._person.approve(ask)

    async def _execute(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        answer = await self._parts.execute({**arguments, "intent": self._text})
        for _ in range(MAX_APPROVAL_ROUNDS):
            if answer.get("status") != "approval_required":
                break
            workflow_id = str(answer.get("workflowId"))
            view = _first_approval(answer)
            choice = await self._ask(
                ApprovalAsk(
                    tool=str(view.get("tool")),
                    capability=str(view.get("capability")),
                    intent=str(view.get("intent") or self._request.decision.intent),
                    rule=str(view.get("rule") or ""),
                    arguments=cast(list[dict[str, Any]], view.get("arguments") or []),
                    summary=str(view.get("args_summary") or ""),
                    grants=cast(dict[str, str], view.get("grants") or {}),
                )
            )
            await self._parts.decide(workflow_id, choice)
            if choice == "deny":
                self._ledger.denied.append(str(view.get("tool")))
            else:
                self._ledger.granted.append({"tool": str(view.get("tool")), "grant": choice})
            answer = await self._parts.execute(
                {
                    "intent": "resume after a person's decision",
                    "continue_workflow": {"workflow_id": workflow_id, "approved": True},
                }
            )
        ok = answer.get("status") != "approval_required"
        return ToolOutcome(name, "ok" if ok else "waiting", _json(answer))


def parse_arguments(text: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or why they are not one."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES:
        return f"arguments are larger than {MAX_ARGUMENT_BYTES} bytes"
    if not text.strip():
        return {}
    try:
        value: object = json.loads(text)
    except (ValueError, RecursionError):
        return "arguments are not valid JSON: send one JSON object"
    if not isinstance(value, dict):
        return "arguments must be a JSON object"
    return cast(dict[str, Any], value)


def result_text(content: object, structured: object) -> str:
    """What a tool result says, as text for the model."""
    parts: list[str] = []
    for item in cast(list[object], content) if isinstance(content, list) else []:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(item, "type", "content")
            parts.append(f"[{kind}]")
    if not parts and structured is not None:
        return _json(structured)
    return "\n".join(parts)


def bounded(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: head and tail, with what was left out."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n…[{len(text) - limit} characters omitted]…\n{text[-tail:]}"


def _first_approval(answer: Mapping[str, Any]) -> dict[str, Any]:
    approvals = answer.get("approvals")
    items = cast(list[object], approvals) if isinstance(approvals, list) else []
    first: object = items[0] if items else None
    return cast(dict[str, Any], first) if isinstance(first, dict) else {}


def _outcome_of(error: PmlError) -> str:
    return {
        "POLICY_DENIED": "refused",
        "PERMISSION_DENIED": "denied",
        "TOOL_ERROR": "tool_error",
        "TIMEOUT": "timeout",
    }.get(error.code, "error")


def _error_text(error: PmlError) -> str:
    return f"Error {error.code}: {error.message}"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


_PROPOSED: Final = (
    "Recorded as a memory proposal. It is applied after your answer (the user is asked "
    "first when it is sensitive); do not call it again."
)
