"""``MontyEngine``: snippets run by pydantic-monty in a pool of worker processes.

pydantic-monty (1.4) always executes in ``monty`` subprocess workers; ``AsyncMonty`` keeps
them warm, so a run pays a checkout (~0.4 ms), not a process start. A crashed or killed
worker is replaced by the pool; the host process is never at risk. Each run checks out its
own session, and a session starts empty: nothing survives from one run to the next.

Inside a worker the snippet has no filesystem (no mounts: ``open``/``os.listdir`` raise
``PermissionError``), no environment (``os.environ`` is "not supported"), no network,
processes, ``__import__``, ``globals``, frames or dunder attributes; ``eval``/``exec``/
``compile`` are shadowed and host-reaching imports are refused (``pml.sandbox.program``).
Its only way out is ``mcp``, which crosses to :class:`~pml.sandbox.bridge.RunBridge`.

Limits (``SandboxSettings``): wall time by a host deadline around the feed (time spent in
tool calls included) and Monty's own feed/sleep limits; memory, recursion depth and host
round trips by Monty's ``ResourceLimits``; tool calls and printed output by the host;
result size and exception messages first inside the sandbox (:mod:`pml.sandbox.guards`:
a value too large never crosses to the gateway), then again by the host.

Example::

    engine = MontyEngine()
    try:
        outcome = await engine.run(
            "return await mcp.fs.read(path=args['p'])",
            args={"p": "/x"}, caller=caller, limits=SandboxSettings(),
        )
    finally:
        await engine.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType
from typing import Any, Final, Self

import anyio
import pydantic_monty as monty

from pml.config import SandboxSettings
from pml.errors import ExecutionFailed, InternalError, InvalidInput, LimitExceeded
from pml.freed_memory import release_freed_memory
from pml.sandbox import study
from pml.sandbox.base import RunOutcome, TenantKey, ToolCaller
from pml.sandbox.bridge import RunBridge
from pml.sandbox.failures import MAX_RECURSION_DEPTH, timeout_error, translate
from pml.sandbox.guards import ERROR_TOO_LONG, MAX_RESULT_INPUT, RESULT_TOO_LARGE
from pml.sandbox.jsonvalue import NotJsonError, json_size, json_value
from pml.sandbox.program import BRIDGE, Program
from pml.sandbox.truncate import TRUNCATION_MARK
from pml.telemetry import observe

# Host round trips a run may make besides tool calls (name lookups of undefined names,
# sleeps, future resolutions); each tool call may take up to three.
BASE_ROUND_TRIPS = 10_000
# pydantic-monty's Rust threads may still deliver a callback to the event loop just after
# the pool closes; exiting the interpreter in that window aborts the process. Let them land.
_CLOSE_GRACE_S = 0.05


class MontyEngine:
    """A ``SandboxEngine`` on pydantic-monty; see the module docstring.

    ``min_workers`` are started with the pool and kept warm; at most ``max_workers``
    (default: the CPU count) run at once, further runs wait for a free worker (the
    ``sandbox_wait`` step; ``observe_wait=False`` when a scheduler in front observes it).
    """

    def __init__(
        self,
        *,
        min_workers: int = 1,
        max_workers: int | None = None,
        binary_path: str | None = None,
        observe_wait: bool = True,
    ) -> None:
        self._min_workers = min_workers
        self._observe_wait = observe_wait
        self._max_workers = max_workers
        self._binary_path = binary_path
        self._pool: monty.AsyncMonty | None = None
        self._lock = anyio.Lock()
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the worker pool now rather than on the first run."""
        await self._started()

    async def aclose(self) -> None:
        """Stop the workers (idempotent); runs afterwards raise ``InternalError``."""
        async with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.__aexit__(None, None, None)
                await anyio.sleep(_CLOSE_GRACE_S)

    async def run(
        self,
        code: str,
        *,
        args: dict[str, Any],
        caller: ToolCaller,
        limits: SandboxSettings,
        tenant: TenantKey | None = None,
    ) -> RunOutcome:
        """Run ``code`` with ``args`` (see ``SandboxEngine.run`` for the errors); the pool
        does not schedule by ``tenant`` (``pml.sandbox.fair`` does), a large snippet's
        program is built in its turn (``pml.sandbox.study``)."""
        started = time.perf_counter()
        program = await study.program(code, limits.max_code_bytes, tenant)
        inputs = {"args": _checked_args(args), MAX_RESULT_INPUT: limits.max_result_bytes}
        pool = await self._started()
        bridge = RunBridge(caller, limits, asyncio.get_running_loop())
        try:
            with observe.step("sandbox"):
                value = await self._feed(pool, program, inputs, bridge, limits)
        finally:
            await bridge.settle()
        if bridge.failure is not None:  # e.g. a PmlError the snippet caught
            raise bridge.failure
        result = _checked_result(value, limits)
        return RunOutcome(
            value=result,
            logs=bridge.logs,
            tool_calls=bridge.tool_calls,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    async def _feed(
        self,
        pool: monty.AsyncMonty,
        program: Program,
        inputs: dict[str, Any],
        bridge: RunBridge,
        limits: SandboxSettings,
    ) -> Any:
        async with contextlib.AsyncExitStack() as stack:
            checkout = pool.checkout(limits=_resource_limits(limits), os_policy=_os_policy(limits))
            quiet = contextlib.nullcontext()
            with observe.step("sandbox_wait") if self._observe_wait else quiet:  # busy: queue
                session = await stack.enter_async_context(checkout)
            with anyio.CancelScope(deadline=anyio.current_time() + limits.wall_time_s) as scope:
                bridge.attach(scope)
                try:
                    return await session.feed_run(
                        program.source,
                        inputs=inputs,
                        external_lookup={
                            BRIDGE: bridge.call,
                            RESULT_TOO_LARGE: bridge.result_too_large,
                            ERROR_TOO_LONG: bridge.error_too_long,
                        },
                        print_callback=bridge.on_print,
                    )
                except monty.MontyError as error:
                    if bridge.failure is not None:
                        raise bridge.failure from None
                    failure = translate(error, program, limits, bridge.tool_errors)
                # The error is freed now: a huge message that crossed (the KeyError of a
                # huge key; what the snippet raises is cut inside the sandbox) leaves tens
                # of MB in glibc's arenas otherwise.
                if TRUNCATION_MARK in failure.message:
                    release_freed_memory()
                raise failure
        # Cancelled: by the bridge (its failure) or by the deadline.
        if bridge.failure is not None:
            raise bridge.failure
        raise timeout_error(limits)

    async def _started(self) -> monty.AsyncMonty:
        pool = self._pool
        if pool is not None:
            return pool
        async with self._lock:
            if self._closed:
                raise InternalError("The sandbox engine is closed")
            if self._pool is None:
                pool = monty.AsyncMonty(
                    binary_path=self._binary_path,
                    min_processes=self._min_workers,
                    max_processes=self._max_workers,
                )
                await pool.__aenter__()
                self._pool = pool
            return self._pool


def _resource_limits(limits: SandboxSettings) -> monty.ResourceLimits:
    return monty.ResourceLimits(
        max_feed_duration_secs=limits.wall_time_s,
        max_memory=limits.memory_mb * 1024 * 1024,
        max_recursion_depth=MAX_RECURSION_DEPTH,
        max_suspensions=BASE_ROUND_TRIPS + 3 * limits.max_tool_calls,
        max_total_sleep_secs=limits.wall_time_s,
    )


SLEEP_BEYOND_DEADLINE_S: Final = 1.0


def _os_policy(limits: SandboxSettings) -> monty.OSPolicy:
    """The worker's clock and entropy; no host call (``'call_host'``) anywhere."""
    return monty.OSPolicy(
        datetime="system",
        timezone="utc",
        sleep="system",
        # Longer than the run may last: the run's deadline, not a sleep cut short to end
        # exactly then, decides (a sleep capped at the limit could return first and let the
        # snippet go on).
        sleep_system_max=limits.wall_time_s + SLEEP_BEYOND_DEADLINE_S,
        process_time="zero",
        random_start="system",
    )


def _checked_args(args: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(args, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidInput("args must be an object", field="args")
    try:
        return json_value(args, "args")
    except NotJsonError as error:
        raise InvalidInput(f"args are not JSON: {error}", field="args") from None


def _checked_result(value: Any, limits: SandboxSettings) -> Any:
    try:
        result = json_value(value, "result")
    except NotJsonError as error:
        raise ExecutionFailed(
            f"TypeError: result is not JSON-serialisable: {error}", exception_type="TypeError"
        ) from None
    if result is None:
        return None
    size = json_size(result)
    if size > limits.max_result_bytes:
        raise LimitExceeded(
            f"Result size {size} bytes exceeds the limit of {limits.max_result_bytes} bytes",
            limit="max_result_bytes",
        )
    return result
