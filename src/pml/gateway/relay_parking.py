"""2026-07-28 calls that wait on their client: upstream requests as ``input_required`` rounds.

A stateless (2026-07-28) client cannot be sent a request in the middle of its call. When an
upstream server asks for sampling, elicitation or roots during such a call, the call is
*parked*: it goes on running in the gateway's background, and the client's ``tools/call`` is
answered with an ``InputRequiredResult`` carrying the upstream's request. The client answers
and sends the same call again with ``inputResponses`` and our ``requestState``
(``pml-relay.<park id>.<nonce>``); the answers go to the waiting upstream request, and the
retry is answered with the call's result, or with the next round:

    parking = Parking(tasks, wait_s=300)
    answer = await parking.start(ctx, call, call_next)     # first request of a call
    answer = await parking.resume(ctx, scope, params)      # a retry carrying answers
    response = await call.park.ask("sampling", request, CreateMessageResult)  # the relay

Only the SHA-256 of each round's nonce is kept, with a digest of the call (tool name and
arguments) and the caller's scope, so an answer is taken once, for that call, from that
caller. A park lives while its call runs, and at most ``wait_s`` (5 s at least) after it;
at most ``MAX_PARKED`` calls wait at once. A client that cancels a round cancels the call
(and the SDK cancels the upstream request); a client that gives up between rounds (its
callback failed, it went away) cannot tell the gateway, so its call is given up when its
question was not answered within ``wait_s``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import anyio
import anyio.abc
import mcp_types
from mcp.server.context import HandlerResult
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from pml.errors import InvalidInput
from pml.gateway.notify import Context
from pml.gateway.relay_calls import ClientCall
from pml.gateway.results import error_result
from pml.registry.scope import Scope
from pml.upstream.calls import requesting

logger = logging.getLogger(__name__)

STATE_PREFIX: Final = "pml-relay."
MAX_PARKED: Final = 64
MAX_ROUND_INPUTS: Final = 16
KEEP_RESULT_S: Final = 5.0  # at least this long, a finished call waits for its client's retry

CallNext = Callable[[Context], Awaitable[HandlerResult]]
_INVALID = InvalidInput("Invalid or expired answer to a relayed request", field="requestState")


class RelayRefused(Exception):
    """The relayed request cannot be answered (no retry in time, a wrong answer, ...)."""


@dataclass(slots=True)
class _Question:
    request: mcp_types.CreateMessageRequest | mcp_types.ElicitRequest | mcp_types.ListRootsRequest
    answer_type: type[BaseModel]
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: BaseModel | None = None
    refusal: str | None = None
    sent: bool = False


def _digest(params: Mapping[str, Any] | None) -> str:
    data = params or {}
    text = json.dumps([data.get("name"), data.get("arguments") or {}], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode("utf-8", "replace")).hexdigest()


class Park:
    """One parked call: its questions to the client and, once it ends, its answer."""

    def __init__(self, ident: str, call: ClientCall, call_digest: str, wait_s: float) -> None:
        self.ident = ident
        self.call = call
        self.call_digest = call_digest
        self.wait_s = wait_s
        self.nonce_hash = ""
        self.result: HandlerResult = None
        self.failure: BaseException | None = None
        self.done = False
        self.cancel = anyio.CancelScope()
        self.collected = anyio.Event()
        self._questions: dict[str, _Question] = {}
        self._changed = anyio.Event()
        self._numbers = 0

    async def ask(
        self,
        kind: str,
        request: mcp_types.CreateMessageRequest
        | mcp_types.ElicitRequest
        | mcp_types.ListRootsRequest,
        answer_type: type[BaseModel],
    ) -> BaseModel:
        """Put ``request`` to the client in the next round; wait (``wait_s``) for its answer."""
        self._numbers += 1
        key = f"{kind}-{self._numbers}"
        question = _Question(request, answer_type)
        self._questions[key] = question
        self._changed.set()
        try:
            with anyio.fail_after(self.wait_s):
                await question.answered.wait()
        except TimeoutError:
            raise RelayRefused(f"the client did not answer within {self.wait_s:g} s") from None
        finally:
            self._questions.pop(key, None)
        if question.answer is None:
            raise RelayRefused(question.refusal or "the client gave no answer")
        return question.answer

    def finish(self, result: HandlerResult, failure: BaseException | None) -> None:
        self.result, self.failure, self.done = result, failure, True
        self._changed.set()

    def unsent(self) -> dict[str, _Question]:
        return {key: q for key, q in self._questions.items() if not q.sent}

    async def changed(self) -> None:
        """Wait until the call ended or has a question not yet put to the client."""
        while not self.done and not self.unsent():
            self._changed = anyio.Event()
            await self._changed.wait()

    def take_answers(self, responses: Mapping[str, Any]) -> None:
        """Hand the client's answers to the questions they answer; ask the others again."""
        for key, question in self._questions.items():
            if not question.sent or question.answered.is_set():
                continue
            given = responses.get(key)
            if given is None:
                question.sent = False  # unanswered: put it again in the next round
                continue
            try:
                raw = given.model_dump(by_alias=True) if isinstance(given, BaseModel) else given
                question.answer = question.answer_type.model_validate(raw, by_name=False)
            except ValidationError as error:
                question.refusal = (
                    f"the client's answer is not valid ({error.error_count()} errors)"
                )
            question.answered.set()


class Parking:
    """The parked calls of one gateway (see the module docstring)."""

    def __init__(self, tasks: anyio.abc.TaskGroup, *, wait_s: float) -> None:
        self._tasks = tasks
        self._wait_s = wait_s
        self._parks: dict[str, Park] = {}

    @property
    def waiting(self) -> int:
        """How many calls are parked now."""
        return len(self._parks)

    async def start(self, ctx: Context, call: ClientCall, call_next: CallNext) -> HandlerResult:
        """Run a new call in the background; answer with its result or its first round."""
        if len(self._parks) >= MAX_PARKED:  # too many waiting: run it in place, unrelayed
            with requesting(call):
                return await call_next(ctx)
        ident = secrets.token_urlsafe(12)
        park = Park(ident, call, _digest(ctx.params), self._wait_s)
        call.park = park
        self._parks[ident] = park
        self._tasks.start_soon(self._drive, park, ctx, call_next)
        return await self._answer(park)

    async def resume(self, ctx: Context, scope: Scope | None) -> HandlerResult:
        """A retry carrying the client's answers: hand them on, answer the next step."""
        params = ctx.params or {}
        state = params.get("requestState")
        ident, _, nonce = str(state)[len(STATE_PREFIX) :].partition(".")
        park = self._parks.get(ident)
        if (
            park is None
            or not nonce
            or not park.nonce_hash
            or not hmac.compare_digest(_hash(nonce), park.nonce_hash)
            or park.call_digest != _digest(params)
            or park.call.scope != scope
        ):
            return error_result(_INVALID)
        park.nonce_hash = ""  # each round's state is taken once
        park.call.ctx = ctx  # progress and the next round go to this request
        responses: object = params.get("inputResponses")
        park.take_answers(cast("dict[str, Any]", responses) if isinstance(responses, dict) else {})
        return await self._answer(park)

    async def _drive(self, park: Park, ctx: Context, call_next: CallNext) -> None:
        result: HandlerResult = None
        failure: BaseException | None = None
        with park.cancel, requesting(park.call):
            try:
                result = await call_next(ctx)
            except Exception as error:  # noqa: BLE001 - handed to the request that collects it
                failure = error
        if park.cancel.cancelled_caught:
            failure = MCPError(mcp_types.INTERNAL_ERROR, "The call was cancelled")
        park.finish(result, failure)
        # The client's retry collects the answer (its person may still be answering), or nobody.
        with anyio.move_on_after(max(park.wait_s, KEEP_RESULT_S)):
            await park.collected.wait()
        self._parks.pop(park.ident, None)

    async def _answer(self, park: Park) -> HandlerResult:
        try:  # the run's next step after an answer: ``wait_s``, 5 s at least, as below
            with anyio.fail_after(max(park.wait_s, KEEP_RESULT_S)):
                await park.changed()
        except TimeoutError:
            park.cancel.cancel()
            park.collected.set()
            self._parks.pop(park.ident, None)
            raise MCPError(mcp_types.REQUEST_TIMEOUT, "The call did not finish in time") from None
        except BaseException:  # the client cancelled its request (or went away)
            park.cancel.cancel()
            park.collected.set()
            self._parks.pop(park.ident, None)
            raise
        if park.done:
            self._parks.pop(park.ident, None)
            park.collected.set()
            if park.failure is not None:
                raise park.failure
            return park.result
        questions = dict(list(park.unsent().items())[:MAX_ROUND_INPUTS])
        for question in questions.values():
            question.sent = True
        nonce = secrets.token_urlsafe(24)
        park.nonce_hash = _hash(nonce)
        return mcp_types.InputRequiredResult(
            input_requests={key: q.request for key, q in questions.items()},
            request_state=f"{STATE_PREFIX}{park.ident}.{nonce}",
        )
