"""Reporting the local client's runs to the PML server: durable, batched, never blocking.

    syncer = TraceSyncer(TraceQueue(data_dir / "traces.db"),
                         base_url="https://pml.example.com", api_key=api_key)
    async with syncer.running():              # a background sender; flushes for 5 s at exit
        syncer.enqueue({"workflowId": "wf-1", "success": True, "durationMs": 12.5,
                        "taskResults": [{"tool": "fs:read_file", "args": {"path": "a.txt"}}]})

``enqueue`` checks and scrubs a trace (``trace_queue.prepare_trace``) and commits it before
it returns; a trace it cannot take is logged and dropped, never raised. The sender posts
batches (at most 100, parents first) to ``{base_url}/api/traces`` and removes a trace only
once the server has answered for it. 200: each status is final except ``pending`` (another
request holds the workflow): that trace stays queued and the next pass waits its
``retryAfterS`` (kept between ``base_delay_s`` and ``max_delay_s``). 400/413/422: the traces go
again one by one; one refused alone is dropped, so it never blocks the queue. 401/403:
logged once, retried every ``max_delay_s``. 429: retried after ``Retry-After``. 5xx, no
connection, timeout: full-jitter exponential backoff (``backoff_delay``). The HTTP client
made here ignores proxy variables; an entry point that needs one passes its own client.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.to_thread
import httpx

from pml.client.sync_answers import (
    backoff_delay,
    body_of,
    describe,
    parse_retry_after,
    results_of,
    seconds_or,
)
from pml.client.trace_queue import QueuedTrace, TraceQueue, prepare_trace
from pml.errors import ConfigError, InvalidInput, PmlError

logger = logging.getLogger(__name__)

MAX_BATCH: Final = 100
POLL_INTERVAL_S: Final = 5.0
FLUSH_TIMEOUT_S: Final = 5.0
FINAL_STATUSES: Final = frozenset({"captured", "duplicate", "expired", "failed", "rejected"})
_MALFORMED: Final = frozenset({400, 413, 422})
_REFUSED: Final = frozenset({401, 403})
_NO_RESULT: Final[Mapping[str, Any]] = {}


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one ``sync_once`` did."""

    sent: int = 0  # traces posted (each once, also when a batch was split)
    removed: int = 0  # taken off the queue: answered by the server, or dropped
    dropped: int = 0  # refused one by one as malformed: lost
    statuses: dict[str, int] = field(default_factory=dict[str, int])
    retry_after_s: float | None = None  # wait this long (the server failed, or asked to)
    error: str | None = None


@dataclass(slots=True)
class _Pass:
    """One pass so far; ``kind`` says why it stopped (None: it did not fail)."""

    sent: int = 0
    dropped: int = 0
    done: list[int] = field(default_factory=list[int])
    statuses: Counter[str] = field(default_factory=Counter[str])
    kind: str | None = None  # "unreachable", "refused", "throttled", "server", "answer"
    error: str | None = None
    wait_s: float | None = None  # what Retry-After asked for
    pending_s: float | None = None  # traces answered ``pending``: when to send them again

    def fail(self, kind: str, error: str, wait_s: float | None = None) -> bool:
        self.kind, self.error, self.wait_s = kind, error, wait_s
        return False


class TraceSyncer:
    """Queues scrubbed traces durably and sends them to the PML server in the background."""

    def __init__(
        self,
        queue: TraceQueue,
        *,
        base_url: str,
        api_key: str,
        http: httpx.AsyncClient | None = None,
        batch_size: int = MAX_BATCH,
        base_delay_s: float = 0.5,
        max_delay_s: float = 60.0,
        request_timeout_s: float = 10.0,
        poll_interval_s: float = POLL_INTERVAL_S,
        rng: random.Random | None = None,
    ) -> None:
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL:
            url = httpx.URL()
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"The PML server URL must be http(s)://host[:port]: {base_url!r}")
        if not api_key or not (api_key.isascii() and api_key.isprintable()):
            raise ConfigError("The API key must be printable ASCII text")
        self.url = f"{base_url.rstrip('/')}/api/traces"
        self.batch_size = min(MAX_BATCH, max(1, batch_size))
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.request_timeout_s = request_timeout_s
        self.poll_interval_s = poll_interval_s
        self._queue = queue
        self._api_key = api_key
        self._http = http
        self._owns_http = http is None
        self._rng = rng or random.Random()
        self._sending = anyio.Lock()
        self._failures = 0  # consecutive failed passes: the backoff exponent
        self._logged: set[str] = set()  # failure kinds logged in the current episode
        self._refused = False  # the last pass failed on the API key
        self._wake: anyio.Event | None = None
        self._loop_thread: int | None = None

    @property
    def pending(self) -> int:
        """How many traces are queued (sent but unanswered ones included)."""
        return self._queue.count()

    def enqueue(self, trace: Mapping[str, Any]) -> None:
        """Scrub, complete and queue one trace (committed on return); never raises."""
        try:
            self._queue.put(prepare_trace(trace))
        except InvalidInput as error:
            logger.warning("trace sync: dropped a trace: %s", error)
            return
        except Exception:  # the agent's answer must never depend on the syncer
            logger.exception("trace sync: could not queue a trace; it was dropped")
            return
        # an anyio.Event is not thread-safe: from another thread, the next poll sends it
        if self._wake is not None and threading.get_ident() == self._loop_thread:
            self._wake.set()

    async def sync_once(self) -> SyncReport:
        """Send one batch (oldest first) and apply the server's answer to the queue."""
        async with self._sending:
            batch = await anyio.to_thread.run_sync(self._queue.peek, self.batch_size)
            if not batch:
                return SyncReport()
            run = _Pass(sent=len(batch))
            await self._deliver(batch, run)
            if run.done:
                await anyio.to_thread.run_sync(self._queue.remove, run.done)
            return self._report(run)

    async def flush(self, timeout_s: float) -> int:
        """Send until the queue is empty or ``timeout_s`` has passed; how many are left."""
        with anyio.move_on_after(timeout_s):
            while True:
                report = await self.sync_once()
                if report.sent == 0 or self._refused:  # a refused key stays refused
                    break
                if report.retry_after_s is not None:
                    await anyio.sleep(report.retry_after_s)
        return await anyio.to_thread.run_sync(self._queue.count)

    @asynccontextmanager
    async def running(
        self, *, flush_timeout_s: float = FLUSH_TIMEOUT_S
    ) -> AsyncGenerator[TraceSyncer]:
        """Run the background sender; at exit, send for at most ``flush_timeout_s`` more.

        The pass in flight at exit is finished, not cancelled (its traces would go twice);
        what is still queued after the flush stays on disk for the next start. An exception
        of the block is raised as it is (not wrapped in an exception group)."""
        raised: BaseException | None = None
        deadline = 0.0  # set when the block exits
        self._loop_thread = threading.get_ident()
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._send_until, stop)
            try:
                yield self
            except BaseException as error:  # noqa: BLE001 - re-raised below, unwrapped
                raised = error
            finally:
                deadline = anyio.current_time() + flush_timeout_s
                stop.set()
                if self._wake is not None:
                    self._wake.set()
                group.cancel_scope.deadline = deadline
        self._wake = None
        with anyio.CancelScope(shield=True):
            try:
                left = await self.flush(max(0.0, deadline - anyio.current_time()))
                if left:
                    logger.info("trace sync: %d traces left on disk for the next start", left)
            except PmlError as error:
                logger.error("trace sync: the final flush failed: %s", error)
            finally:
                await self.aclose()
        if raised is not None:
            raise raised

    async def aclose(self) -> None:
        """Close the HTTP client the syncer made (not one it was given)."""
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- sending -------------------------------------------------------------------------

    async def _send_until(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            wake = self._wake = anyio.Event()  # before the pass: a trace queued during it wakes
            try:
                report = await self.sync_once()
            except Exception:  # the sender's top level: a broken file must not stop it
                logger.exception("trace sync: a pass failed; retrying in %.0f s", self.max_delay_s)
                report = SyncReport(retry_after_s=self.max_delay_s, error="internal error")
            if report.retry_after_s is not None:  # new traces do not cut a backoff short
                with anyio.move_on_after(report.retry_after_s):
                    await stop.wait()
            elif report.sent == 0:
                with anyio.move_on_after(self.poll_interval_s):
                    await wake.wait()  # ``running`` sets it too, to stop

    async def _deliver(self, batch: Sequence[QueuedTrace], run: _Pass) -> None:
        response = await self._post(batch)
        if len(batch) == 1 or isinstance(response, str) or response.status_code not in _MALFORMED:
            self._apply(batch, response, run)
            return
        logger.warning(
            "trace sync: the server refused a batch of %d traces (%s); sending them one by one",
            len(batch),
            describe(response),
        )
        for item in batch:
            if not self._apply([item], await self._post([item]), run):
                return

    async def _post(self, batch: Sequence[QueuedTrace]) -> httpx.Response | str:
        """The server's response, or why there is none."""
        payload = json.dumps({"traces": [item.trace for item in batch]}, ensure_ascii=False)
        headers = {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json"}
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False, follow_redirects=False)
        try:
            with anyio.fail_after(self.request_timeout_s):  # httpx's timeouts are per phase
                return await self._http.post(
                    self.url,
                    content=payload.encode("utf-8"),
                    headers=headers,
                    timeout=self.request_timeout_s,
                )
        except (httpx.HTTPError, OSError) as error:  # TimeoutError is an OSError
            return f"{type(error).__name__}: {error}".rstrip(": ")

    def _apply(
        self, batch: Sequence[QueuedTrace], response: httpx.Response | str, run: _Pass
    ) -> bool:
        """Apply one answer to ``run``; False when the pass must stop (the server failed)."""
        if isinstance(response, str):
            return run.fail("unreachable", f"no answer from the server ({response})")
        status = response.status_code
        if status in _MALFORMED:  # one trace, refused on its own: it would block the queue
            logger.error(
                "trace sync: the server refused trace %s as malformed (%s); dropped",
                batch[0].trace.get("traceId"),
                describe(response),
            )
            run.done.append(batch[0].id)
            run.dropped += 1
            return True
        if status in _REFUSED:
            return run.fail("refused", describe(response))
        if status == 429:
            wait_s = parse_retry_after(response.headers.get("retry-after"))
            return run.fail("throttled", "the server asks to slow down (HTTP 429)", wait_s)
        if status != 200:
            return run.fail("server", f"the server failed ({describe(response)})")
        return self._answered(batch, results_of(body_of(response)), run)

    def _answered(
        self, batch: Sequence[QueuedTrace], results: list[Mapping[str, Any]] | None, run: _Pass
    ) -> bool:
        if results is None:
            return run.fail("answer", "the server's answer is not {'results': [...]}")
        by_id: dict[object, Mapping[str, Any]] = {}
        for result in results:
            by_id.setdefault(result.get("traceId"), result)
        unanswered = 0
        for index, item in enumerate(batch):
            trace_id = item.trace.get("traceId")
            result = results[index] if index < len(results) else _NO_RESULT
            if not result or result.get("traceId") not in (trace_id, None):  # else by id
                result = by_id.get(trace_id, _NO_RESULT)
            status, message = result.get("status"), result.get("message")
            if not isinstance(status, str):
                unanswered += 1
                continue
            if status == "pending":  # another request holds it: kept, sent again later
                run.statuses[status] += 1
                wait_s = max(seconds_or(result.get("retryAfterS"), 0.0), self.base_delay_s)
                run.pending_s = min(max(run.pending_s or 0.0, wait_s), self.max_delay_s)
                continue
            run.done.append(item.id)
            run.statuses[status] += 1
            detail = message[:200] if isinstance(message, str) else ""
            if status in ("rejected", "failed"):
                logger.warning("trace sync: the server %s trace %s: %s", status, trace_id, detail)
            elif status == "expired":
                logger.info("trace sync: trace %s expired on the server: %s", trace_id, detail)
            elif status not in FINAL_STATUSES:
                logger.warning("trace sync: unknown status %.40r for trace %s", status, trace_id)
        if unanswered:
            return run.fail("answer", f"the server's answer has no status for {unanswered} traces")
        return True

    def _report(self, run: _Pass) -> SyncReport:
        """The pass's report, with the wait before the next one if the server failed."""
        self._refused = run.kind == "refused"
        done = (run.sent, len(run.done), run.dropped, dict(run.statuses))
        if run.kind is None:
            if self._logged:
                logger.info("trace sync: the server takes traces again")
            self._failures = 0
            self._logged.clear()
            if run.pending_s is not None:
                logger.info(
                    "trace sync: %d trace(s) being captured by another request; "
                    "sent again in %.0f s",
                    run.statuses["pending"],
                    run.pending_s,
                )
            return SyncReport(*done, retry_after_s=run.pending_s)
        self._failures += 1
        if run.kind == "refused":
            delay = self.max_delay_s
        elif run.wait_s is not None:
            delay = min(run.wait_s, self.max_delay_s)
        else:
            base, top = self.base_delay_s, self.max_delay_s
            delay = backoff_delay(self._failures - 1, base_s=base, max_s=top, rng=self._rng)
        if run.kind not in self._logged:  # once per episode, not once per retry
            self._logged.add(run.kind)
            if run.kind == "refused":
                logger.error(
                    "API key refused by the server %s (%s); traces are kept, retried every %.0f s",
                    self.url,
                    run.error,
                    self.max_delay_s,
                )
            else:
                logger.warning("trace sync: %s; traces are kept and retried", run.error)
        return SyncReport(*done, retry_after_s=delay, error=run.error)
