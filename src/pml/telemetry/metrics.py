"""Prometheus metrics of a gateway process, counted as its steps end (``GET /metrics``).

    async with open_gateway(settings) as gateway:    # observes every step while open
        ...
    count_auth_failure("invalid_key")                # edges count what no step sees
    count_rate_limited("api")                        # for whoever refuses a caller
    text = generate_latest(process_metrics().registry)

One ``StepMetrics`` per process (``process_metrics()``): steps are process-wide, and so
are counters, which Prometheus expects to grow for the life of a process. Tests that need
exact figures make their own ``StepMetrics()`` (an isolated registry) or assert deltas.

Labels stay bounded whatever clients send: a tool name becomes a label only when an open
gateway knows it (its own tools, listed pass-through tools, capability tools that ran),
else ``other``; every label value is cut to ``MAX_LABEL_CHARS`` and made encodable; and
each family keeps at most ``MAX_LABEL_SETS`` label sets, later ones counted as ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Generator, Iterable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pml.policy.model import INTENTS
from pml.registry.names import CAPABILITY_TOOL_PREFIX
from pml.telemetry import observe
from pml.telemetry.observe import Step

if TYPE_CHECKING:
    from pml.registry.changes import CapabilityChange

# Each counter would otherwise carry a second ``_created`` series: twice the scrape for a
# figure nobody graphs. Process-wide in prometheus-client, and PML is the process.
prometheus_client.disable_created_metrics()

OTHER = "other"
MAX_LABEL_SETS = 1000
MAX_LABEL_CHARS = 128
# Outcomes, modes and kinds come from PML's own code; anything else is shown as "other".
_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
LANES = frozenset({"mcp", "stdio"})
POLICY_SOURCES = frozenset(
    {
        "pml_execute",
        "pml_discover",
        "pass_through",
        "continue_workflow",
        "capability_tool",
        "trace",
        "client",
    }
)
AUTH_FAILURE_REASONS = frozenset({"missing", "malformed", "invalid", "forbidden"})

# Seconds: calls through a gateway take from a fraction of a millisecond to minutes.
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
LONG_BUCKETS = (*CALL_BUCKETS, 10, 30, 60, 120, 300)


def label_value(value: str) -> str:
    """``value`` as a label: at most ``MAX_LABEL_CHARS``, always encodable as UTF-8."""
    cut = value[:MAX_LABEL_CHARS]
    if cut.isascii():
        return cut
    # A lone surrogate (JSON allows "\\ud800") would make the whole exposition unencodable.
    return cut.encode("utf-8", "replace").decode("utf-8")


def word(value: str) -> str:
    """A code-given value (outcome, mode, kind) as a label, ``other`` when it is not one."""
    return value if _WORD.fullmatch(value) else OTHER


class BoundedLabels:
    """The children of one labelled metric, at most ``limit`` label sets (then ``other``)."""

    __slots__ = ("_children", "_limit", "_metric", "_overflow")

    def __init__(self, metric: Any, limit: int = MAX_LABEL_SETS) -> None:
        self._metric = metric
        self._limit = limit
        self._children: dict[tuple[str, ...], Any] = {}
        self._overflow: Any = None

    def child(self, *values: str) -> Any:
        """The child for ``values`` (the ``other`` one once the family is full)."""
        found = self._children.get(values)
        if found is not None:
            return found
        if len(self._children) >= self._limit:
            if self._overflow is None:
                self._overflow = self._metric.labels(*([OTHER] * len(values)))
            return self._overflow
        found = self._metric.labels(*(label_value(value) for value in values))
        self._children[values] = found
        return found

    def __len__(self) -> int:
        return len(self._children)


class ToolNameSource(Protocol):
    """What a gateway knows of tool names, without I/O (``GatewayTools`` is one)."""

    def is_gateway_tool(self, name: str) -> bool: ...

    def pass_through_target(self, name: str) -> tuple[str, str] | None: ...


class KnownTools:
    """Which tool names may become labels: those some open gateway knows."""

    def __init__(self, limit: int = MAX_LABEL_SETS) -> None:
        self._sources: list[ToolNameSource] = []
        self._limit = limit
        self._known: set[str] = set()

    def add(self, source: ToolNameSource) -> None:
        """Know the names ``source`` knows (an opening gateway's tools)."""
        self._sources.append(source)

    def discard(self, source: ToolNameSource) -> None:
        """Forget ``source`` (its gateway closed); names already shown stay labels."""
        self._sources = [known for known in self._sources if known is not source]

    def label(self, name: str, outcome: str) -> str:
        """``name`` when a gateway knows it, else ``other``.

        A capability tool (``mcp__...``) is known once a call of it succeeded: anyone may
        send such names, only real capabilities run.
        """
        if name in self._known:
            return name
        if len(self._known) >= self._limit:
            return OTHER
        if name.startswith(CAPABILITY_TOOL_PREFIX):
            known = outcome == "ok" and bool(self._sources)
        else:
            known = any(
                source.is_gateway_tool(name) or source.pass_through_target(name) is not None
                for source in self._sources
            )
        if not known:
            return OTHER
        self._known.add(name)
        return name


class StepMetrics:
    """The observer that counts steps, and the counters the edges bump (see module)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.tools = KnownTools()
        r = self.registry
        self.tool_calls = _counter(
            r, "pml_tool_calls", "Tool calls from clients", ["tool", "lane", "outcome"]
        )
        self.tool_call_seconds = _histogram(
            r, "pml_tool_call_duration_seconds", "Tool call latency", ["tool", "lane"], LONG_BUCKETS
        )
        self.upstream_calls = _counter(
            r, "pml_upstream_calls", "Calls to upstream servers", ["server", "tool", "outcome"]
        )
        self.upstream_seconds = _histogram(
            r,
            "pml_upstream_call_duration_seconds",
            "Upstream call latency",
            ["server", "tool"],
            LONG_BUCKETS,
        )
        self.executions = _counter(
            r, "pml_execute_runs", "pml_execute runs and capability tool runs", ["mode", "outcome"]
        )
        self.execute_seconds = _histogram(
            r, "pml_execute_duration_seconds", "pml_execute run duration", ["mode"], LONG_BUCKETS
        )
        self.policy = _counter(
            r, "pml_policy_decisions", "Policy decisions", ["source", "intent", "outcome"]
        )
        self.sandbox_runs = _counter(r, "pml_sandbox_runs", "Snippets run", ["outcome"])
        self.sandbox_seconds = Histogram(
            "pml_sandbox_run_duration_seconds",
            "Snippet run duration",
            registry=r,
            buckets=LONG_BUCKETS,
        )
        self.sandbox_queue = Gauge(
            "pml_sandbox_queue_length", "Runs waiting for a sandbox worker", registry=r
        )
        self.sandbox_wait_seconds = Histogram(
            "pml_sandbox_wait_seconds",
            "Wait for a sandbox worker",
            registry=r,
            buckets=LONG_BUCKETS,
        )
        self.sandbox_busy = Counter(
            "pml_sandbox_busy", "Runs refused BUSY: their tenant's queue was full", registry=r
        )
        self.auth_failures = _counter(
            r, "pml_auth_failures", "HTTP requests refused for their key", ["reason"]
        )
        self.rate_limited = _counter(
            r, "pml_rate_limit_refusals", "Requests refused by a rate limit", ["limit"]
        )
        self.traces = _counter(r, "pml_traces_ingested", "Client traces ingested", ["status"])
        self.capability_changes = _counter(
            r, "pml_capability_changes", "Capability changes made by this process", ["kind"]
        )
        self._ends: dict[str, Callable[[Step], None]] = {
            "tool_call": self._tool_call,
            "upstream_call": self._upstream_call,
            "execute": self._execute,
            "policy": self._policy,
            "sandbox": self._sandbox,
            "sandbox_wait": self._sandbox_wait,
        }

    # -- the observer ----------------------------------------------------------------------

    def begin(self, step: Step) -> object:
        """Count a run entering the sandbox queue."""
        if step.kind == "sandbox_wait":
            self.sandbox_queue.inc()
        return None

    def end(self, step: Step, token: object) -> None:
        """Count the ended step in its families."""
        counted = self._ends.get(step.kind)
        if counted is not None:
            counted(step)

    def _tool_call(self, step: Step) -> None:
        attributes = step.attributes
        outcome = word(step.outcome)
        tool = self.tools.label(attributes.get("tool", ""), outcome)
        lane = attributes.get("lane", "")
        lane = lane if lane in LANES else OTHER
        self.tool_calls.child(tool, lane, outcome).inc()
        self.tool_call_seconds.child(tool, lane).observe(step.duration_s)

    def _upstream_call(self, step: Step) -> None:
        # The pool refuses unknown servers and tools before this step: both come from the
        # configuration and the servers' own catalogs.
        server = step.attributes.get("server", "")
        tool = step.attributes.get("tool", "")
        self.upstream_calls.child(server, tool, word(step.outcome)).inc()
        self.upstream_seconds.child(server, tool).observe(step.duration_s)

    def _execute(self, step: Step) -> None:
        mode = word(step.attributes.get("mode", ""))
        self.executions.child(mode, word(step.outcome)).inc()
        self.execute_seconds.child(mode).observe(step.duration_s)

    def _policy(self, step: Step) -> None:
        source = step.attributes.get("source", "")
        intent = step.attributes.get("intent", "")
        self.policy.child(
            source if source in POLICY_SOURCES else OTHER,
            intent if intent in INTENTS else OTHER,
            word(step.outcome),
        ).inc()

    def _sandbox(self, step: Step) -> None:
        self.sandbox_runs.child(word(step.outcome)).inc()
        self.sandbox_seconds.observe(step.duration_s)

    def _sandbox_wait(self, step: Step) -> None:
        self.sandbox_queue.dec()
        if step.outcome == "BUSY":  # refused, not waited for: no wait to count
            self.sandbox_busy.inc()
            return
        self.sandbox_wait_seconds.observe(step.duration_s)

    # -- what the edges count --------------------------------------------------------------

    def count_capability_change(self, kind: str) -> None:
        """One capability change of ``kind`` (``named``, ``captured_unnamed``, ...)."""
        self.capability_changes.child(word(kind)).inc()


def _counter(
    registry: CollectorRegistry, name: str, documentation: str, labels: list[str]
) -> BoundedLabels:
    return BoundedLabels(Counter(name, documentation, labels, registry=registry))


def _histogram(
    registry: CollectorRegistry,
    name: str,
    documentation: str,
    labels: list[str],
    buckets: tuple[float, ...],
) -> BoundedLabels:
    metric = Histogram(name, documentation, labels, registry=registry, buckets=buckets)
    return BoundedLabels(metric)


_process: list[StepMetrics] = []
_open_gateways: list[object] = []


def process_metrics() -> StepMetrics:
    """This process's metrics (created on first use)."""
    if not _process:
        _process.append(StepMetrics())
    return _process[0]


class ChangeSource(Protocol):
    """A capability registry's change announcements (``CapabilityRegistry.on_change``)."""

    def on_change(self, listener: Callable[[CapabilityChange], Awaitable[None]]) -> None: ...


@contextmanager
def observing(tools: ToolNameSource, registry: ChangeSource | None = None) -> Generator[None]:
    """While the block runs, this process's metrics count every step and know ``tools``'
    names; ``registry``'s changes are counted (a gateway's life)."""
    metrics = process_metrics()
    metrics.tools.add(tools)
    if registry is not None:

        async def changed(change: CapabilityChange) -> None:
            metrics.count_capability_change(change.kind)

        registry.on_change(changed)
    _open_gateways.append(tools)
    observe.add_observer(metrics)
    try:
        yield
    finally:
        _open_gateways.remove(tools)
        metrics.tools.discard(tools)
        if not _open_gateways:  # the last gateway closed: steps cost one check again
            observe.remove_observer(metrics)


def count_auth_failure(reason: str) -> None:
    """One HTTP request refused for its key: ``missing``, ``malformed``, ``invalid`` or
    ``forbidden`` (a valid key whose role may not: an agent key at ``/metrics``)."""
    reason = reason if reason in AUTH_FAILURE_REASONS else OTHER
    process_metrics().auth_failures.child(reason).inc()


def count_rate_limited(limit: str) -> None:
    """One request refused by the rate limit named ``limit`` (e.g. ``auth``, ``api``)."""
    process_metrics().rate_limited.child(word(limit)).inc()


def count_traces(statuses: Iterable[str]) -> None:
    """Client traces ingested, one per status (``captured``, ``duplicate``, ...)."""
    family = process_metrics().traces
    for status in statuses:
        family.child(word(status)).inc()
