"""Asking the person in the client's own UI (MCP elicitation) when a run waits for approval.

    edge = ApprovalEdge(executor, policy.approvals, policy.audit)
    result = await tools.call_tool(scope, name, arguments)
    result = await edge.settle(ctx, scope, name, arguments, result)   # may ask the person

A call whose answer is ``approval_required`` is not handed back to the agent at once when
the client declared the elicitation capability (form mode): the person is asked, in the
client, with a form whose one field ``decision`` is ``deny | once | session | always``.

- 2025-11-25 sessions: ``elicitation/create`` is sent inside the same ``tools/call`` and
  answered within ``[permissions] approval_wait_s``. A grant resumes the run at once;
  ``deny``, decline or cancel end it (``PERMISSION_DENIED``); no answer in time (or a client
  that fails the request) leaves the run paused for an approval out of band.
- 2026-07-28 (stateless): the answer is an ``input_required`` result carrying the form; the
  client asks the person and sends the same call again with the answer and the
  ``requestState`` we minted: ``<workflowId>.<nonce>``. Only the SHA-256 of the nonce is
  stored, with the round's deadline and a digest of the call, so an answer is taken once,
  for that workflow and call, before the deadline; anything else decides nothing.

With ``[permissions] approval_url`` (the dashboard's public address, from configuration
only), a 2025-11-25 client that declared URL-mode elicitation is sent a link to the
approval's page there instead (``elicitationId`` = the workflow id); the call waits up to
``approval_wait_s`` for a person to decide on the dashboard, then completes at once
(``notifications/elicitation/complete`` is sent). A refused link or no decision in time
leaves the run paused, as above.

The decision is the person's (``decided_by: elicitation:<client name>``): the agent only
ever sees the tool result, never the form. A client without elicitation gets the paused
answer and a person approves with ``pml approvals`` or ``POST /api/approvals/{id}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast
from urllib.parse import quote

import anyio
import mcp_types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pml.errors import AlreadyDecided, InvalidInput, PmlError
from pml.execution.approval_desk import GRANT_LIFETIMES, Decision
from pml.execution.approvals import ApprovalFlow
from pml.gateway.notify import Context
from pml.gateway.results import error_result, json_result
from pml.gateway.schemas import ContinueWorkflow, ExecuteParams
from pml.gateway.tool_seams import Executor
from pml.gateway.tools import capability_answer, is_execute
from pml.policy.approval_review import review_lines, visible
from pml.policy.model import Auditor
from pml.registry.scope import Scope

logger = logging.getLogger(__name__)

INPUT_KEY: Final = "pml_approval"
DECISION_FIELD: Final = "decision"
MAX_ROUNDS: Final = 8
MAX_MESSAGE_CHARS: Final = 12_000
ROUND_KEY: Final = "elicitation"
DECISION_POLL_S: Final = 0.5  # how often a call sent to the dashboard looks for the decision
FORM_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        DECISION_FIELD: {
            "type": "string",
            "title": "Decision",
            "description": (
                "deny: refuse this call. once: allow only this call with these arguments. "
                "session: allow this tool for a while. always: allow this tool until revoked."
            ),
            "enum": ["deny", "once", "session", "always"],
            "default": "deny",
        }
    },
    "required": [DECISION_FIELD],
}

Result = mcp_types.CallToolResult | mcp_types.InputRequiredResult
_INVALID_ANSWER = InvalidInput("Invalid or expired approval answer", field="requestState")


def waiting_of(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    """The ``approval_required`` answer a tool result carries, if it is one."""
    content = result.structured_content
    if result.is_error or not isinstance(content, dict):
        return None
    data = cast(dict[str, Any], content)
    approvals = data.get("approvals")
    workflow_id = data.get("workflowId")
    if data.get("status") != "approval_required" or not isinstance(workflow_id, str):
        return None
    return data if isinstance(approvals, list) and approvals else None


def form_message(answer: Mapping[str, Any]) -> str:
    """What the person reads in the form: the call, who asks, every argument (target first)."""
    view = cast(dict[str, Any], cast(list[Any], answer["approvals"])[0])
    lines = ["PML: an agent's run waits for your approval.", *review_lines(view)]
    text = "\n".join(lines)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def client_can_elicit(ctx: Context) -> bool:
    """Whether the client of this request declared form-mode elicitation."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    # An empty elicitation capability means form mode (the protocol's default).
    return elicitation.form is not None or elicitation.url is None


def client_opens_urls(ctx: Context) -> bool:
    """Whether the client of this request declared URL-mode elicitation."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


def url_message(answer: Mapping[str, Any]) -> str:
    """What the client shows beside the link: which call waits, and where it is decided."""
    view = cast(dict[str, Any], cast(list[Any], answer["approvals"])[0])
    return (
        f"PML: an agent's call of {visible(view.get('tool'), 120)} waits for your approval. "
        "Open the PML dashboard to read it in full and decide."
    )


def client_name(ctx: Context) -> str:
    """The client's name as it introduced itself (for ``decided_by``), made safe to show."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else None
    return visible(name or "client")[:64]


def decision_of(result: object) -> Decision:
    """The person's decision in an elicitation result: a grant only from a valid accept."""
    if not isinstance(result, mcp_types.ElicitResult) or result.action != "accept":
        return "deny"
    content = result.content or {}
    value = content.get(DECISION_FIELD)
    return value if value in GRANT_LIFETIMES else "deny"  # pyright: ignore[reportReturnType]


def _call_digest(name: str, arguments: Mapping[str, Any] | None) -> str:
    text = json.dumps([name, arguments or {}], sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _nonce_hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode("utf-8", "replace")).hexdigest()


class ApprovalEdge:
    """Elicits a person's decision for paused calls, in both protocol generations."""

    def __init__(self, executor: Executor, flow: ApprovalFlow, auditor: Auditor) -> None:
        self._executor = executor
        self._flow = flow
        self._auditor = auditor

    @property
    def wait_s(self) -> float:
        return self._flow.desk.settings.approval_wait_s

    async def settle(
        self,
        ctx: Context,
        scope: Scope,
        name: str,
        arguments: Mapping[str, Any] | None,
        result: mcp_types.CallToolResult,
    ) -> Result:
        """``result``, or — when it waits for approval and the client can ask its person —
        what the person decided (the resumed run's result, or the form to show)."""
        for _ in range(MAX_ROUNDS):
            waiting = waiting_of(result)
            if waiting is None:
                return result
            page = self._page_of(ctx, waiting)
            if page is not None:
                if not await self._wait_on_page(ctx, scope, waiting, page):
                    return result  # not decided in time: the run stays paused
                return await self._continue(scope, name, str(waiting["workflowId"]))
            if not client_can_elicit(ctx):
                return result
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await self._input_required(ctx, scope, name, arguments, waiting, result)
            decision = await self._ask_in_session(ctx, scope, waiting)
            if decision is None:
                return result  # no answer in time: a person approves out of band
            result = await self._decided(ctx, scope, name, waiting["workflowId"], decision)
        return result

    async def answered(
        self,
        ctx: Context,
        scope: Scope,
        params: mcp_types.CallToolRequestParams,
    ) -> Result:
        """A 2026-07-28 client's retry carrying the person's answer to our form."""
        token = params.request_state or ""
        workflow_id, _, nonce = token.partition(".")
        stored = await self._flow.stored(scope, workflow_id) if workflow_id else None
        pending = stored.state.get(ROUND_KEY) if stored is not None else None
        round_ = cast(dict[str, Any], pending) if isinstance(pending, dict) else {}
        expected = str(round_.get("nonce") or "")
        if (
            stored is None
            or not nonce
            or not expected
            or not hmac.compare_digest(_nonce_hash(nonce), expected)
            or round_.get("call") != _call_digest(params.name, params.arguments)
        ):
            self._audit(scope, workflow_id[:80], "elicitation_refused", "not the form PML sent")
            return error_result(_INVALID_ANSWER)
        if stored.decision is None and datetime.now(UTC).isoformat() > str(round_.get("deadline")):
            self._audit(scope, workflow_id, "elicitation_late", "answered after approval_wait_s")
            return await self._still_waiting(scope, workflow_id)
        responses = params.input_responses or {}
        decision = decision_of(responses.get(INPUT_KEY))
        result = await self._decided(ctx, scope, params.name, workflow_id, decision)
        return await self.settle(ctx, scope, params.name, params.arguments, result)

    async def _still_waiting(self, scope: Scope, workflow_id: str) -> Result:
        stored = await self._flow.stored(scope, workflow_id)
        if stored is None:
            return error_result(_INVALID_ANSWER)
        return json_result(self._flow.answer(scope, stored, pending=True))

    async def _input_required(
        self,
        ctx: Context,
        scope: Scope,
        name: str,
        arguments: Mapping[str, Any] | None,
        waiting: dict[str, Any],
        result: mcp_types.CallToolResult,
    ) -> Result:
        workflow_id = str(waiting["workflowId"])
        stored = await self._flow.stored(scope, workflow_id)
        if stored is None:
            return result
        nonce = secrets.token_urlsafe(24)
        deadline = datetime.now(UTC) + timedelta(seconds=self.wait_s)
        state = dict(stored.state)
        state[ROUND_KEY] = {
            "nonce": _nonce_hash(nonce),
            "deadline": deadline.isoformat(),
            "call": _call_digest(name, arguments),
            "client": client_name(ctx),
        }
        if not await self._flow.open_round(scope, workflow_id, state):
            return result
        form = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message=form_message(waiting), requested_schema=FORM_SCHEMA
            )
        )
        return mcp_types.InputRequiredResult(
            input_requests={INPUT_KEY: form}, request_state=f"{workflow_id}.{nonce}"
        )

    def _page_of(self, ctx: Context, waiting: Mapping[str, Any]) -> str | None:
        """The dashboard page to send the person to, when ``[permissions] approval_url`` is
        set and this (2025-11-25) session's client declared URL-mode elicitation."""
        base = self._flow.desk.settings.approval_url
        if base is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        if not client_opens_urls(ctx):
            return None
        return f"{base.rstrip('/')}/ui/approvals/{quote(str(waiting['workflowId']), safe='')}"

    async def _wait_on_page(
        self, ctx: Context, scope: Scope, waiting: Mapping[str, Any], page: str
    ) -> bool:
        """Send the person to ``page`` and wait (``approval_wait_s``) until someone decides:
        True once decided (either way), False when nobody did in time or the link was
        refused (the run then stays paused for an approval out of band)."""
        workflow_id = str(waiting["workflowId"])
        with anyio.move_on_after(self.wait_s):
            try:
                answer = await ctx.session.elicit_url(
                    message=url_message(waiting),
                    url=page,
                    elicitation_id=workflow_id,
                    related_request_id=ctx.request_id,
                )
            except Exception as error:  # noqa: BLE001 - any failure: nobody answered
                self._audit(scope, workflow_id, "elicitation_failed", str(error))
                return False
            if answer.action != "accept":
                self._audit(scope, workflow_id, "link_refused", answer.action)
                return False
            while True:
                stored = await self._flow.stored(scope, workflow_id)
                if stored is None:
                    return False
                if stored.decision is not None:
                    with contextlib.suppress(Exception):  # the client may be gone already
                        await ctx.session.send_elicit_complete(workflow_id, ctx.request_id)
                    return True
                await anyio.sleep(DECISION_POLL_S)
        self._audit(scope, workflow_id, "elicitation_timeout", "not decided on the dashboard")
        return False

    async def _ask_in_session(
        self, ctx: Context, scope: Scope, waiting: dict[str, Any]
    ) -> Decision | None:
        answer: object = None
        with anyio.move_on_after(self.wait_s) as waited:
            try:
                answer = await ctx.session.elicit_form(
                    message=form_message(waiting),
                    requested_schema=FORM_SCHEMA,
                    related_request_id=ctx.request_id,
                )
            except Exception as error:  # noqa: BLE001 - any failure: nobody answered
                logger.info("elicitation failed (%s); the run waits out of band", error)
                self._audit(scope, str(waiting["workflowId"]), "elicitation_failed", str(error))
                return None
        if waited.cancelled_caught:
            self._audit(scope, str(waiting["workflowId"]), "elicitation_timeout", "no answer")
            return None
        return decision_of(answer)

    async def _decided(
        self, ctx: Context, scope: Scope, name: str, workflow_id: str, decision: Decision
    ) -> mcp_types.CallToolResult:
        try:
            await self._flow.desk.decide(
                workflow_id,
                decision,
                org=scope.org,
                project=scope.project,
                user=scope.user,
                decided_by=f"elicitation:{client_name(ctx)}",
                actor=scope.user,
            )
        except AlreadyDecided:
            pass  # a person decided elsewhere meanwhile: that decision stands
        except PmlError as error:
            return error_result(error)
        return await self._continue(scope, name, workflow_id)

    async def _continue(
        self, scope: Scope, name: str, workflow_id: str
    ) -> mcp_types.CallToolResult:
        """Resume the workflow a call of ``name`` paused, answered as that tool answers."""
        params = ExecuteParams(
            intent="resume after a person's decision",
            continue_workflow=ContinueWorkflow(workflow_id=workflow_id, approved=True),
        )
        try:
            answer = await self._executor.execute(scope, params)
        except PmlError as error:
            if is_execute(name):
                return json_result({"status": "error", "error": error.to_dict()}, is_error=True)
            return error_result(error)
        return json_result(answer) if is_execute(name) else capability_answer(answer)

    def _audit(self, scope: Scope, workflow_id: str, outcome: str, why: str) -> None:
        self._auditor.emit(
            "APPROVAL_ELICITATION",
            scope=scope,
            details={"workflow_id": workflow_id, "outcome": outcome, "reason": why[:200]},
            decided_by=None,
            actor=scope.user,
        )
