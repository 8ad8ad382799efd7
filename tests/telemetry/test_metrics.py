"""The step metrics on an isolated registry, their label bounds, and the scrape-time figures
(server states, approvals pending with its cache, the database pool)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Generator
from datetime import UTC, datetime

import anyio
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pml.errors import NotFound
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.workflow_repo import WorkflowStateStore
from pml.telemetry import metrics, observe
from pml.telemetry.metrics import MAX_LABEL_CHARS, OTHER, StepMetrics, label_value
from pml.upstream.base import ServerStatus
from pml.web.metrics import GatewayCollector, MetricsSources, PendingApprovals

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "webapp", "erwan")


class Names:
    """A gateway's known names: its own tools and listed pass-through tools."""

    def __init__(self, own: set[str], pass_through: dict[str, tuple[str, str]]) -> None:
        self.own = own
        self.pass_through = pass_through

    def is_gateway_tool(self, name: str) -> bool:
        return name in self.own

    def pass_through_target(self, name: str) -> tuple[str, str] | None:
        return self.pass_through.get(name)


@pytest.fixture
def counted() -> Generator[StepMetrics]:
    """Isolated step metrics watching every step, knowing one gateway's names."""
    step_metrics = StepMetrics(CollectorRegistry())
    step_metrics.tools.add(Names({"pml_execute"}, {"time__now": ("time", "now")}))
    observe.add_observer(step_metrics)
    try:
        yield step_metrics
    finally:
        observe.remove_observer(step_metrics)


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample, read back through the parser (which fails on an invalid exposition)."""
    text = generate_latest(registry).decode("utf-8")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(step_metrics: StepMetrics, name: str, **labels: str) -> float:
    return samples(step_metrics.registry).get((name, frozenset(labels.items())), 0.0)


def test_a_tool_call_is_counted_by_tool_lane_and_outcome_with_its_duration(
    counted: StepMetrics,
) -> None:
    with observe.step("tool_call", tool="time__now", lane="mcp", key="pml_ab", user="u"):
        pass
    with observe.step("tool_call", tool="time__now", lane="mcp") as step:
        step.outcome = "tool_error"

    labels = {"tool": "time__now", "lane": "mcp"}
    assert value(counted, "pml_tool_calls_total", **labels, outcome="ok") == 1
    assert value(counted, "pml_tool_calls_total", **labels, outcome="tool_error") == 1
    assert value(counted, "pml_tool_call_duration_seconds_count", **labels) == 2
    assert value(counted, "pml_tool_call_duration_seconds_bucket", **labels, le="+Inf") == 2


def test_a_step_that_raises_is_counted_with_the_errors_code(counted: StepMetrics) -> None:
    with pytest.raises(NotFound), observe.step("upstream_call", server="time", tool="now"):
        raise NotFound("gone")

    labels = {"server": "time", "tool": "now"}
    assert value(counted, "pml_upstream_calls_total", **labels, outcome="NOT_FOUND") == 1
    assert value(counted, "pml_upstream_call_duration_seconds_count", **labels) == 1


def test_runs_policy_decisions_and_sandbox_runs_are_counted(counted: StepMetrics) -> None:
    with observe.step("execute", mode="code") as step:
        step.outcome = "approval_required"
    with observe.step("policy", source="pml_execute") as step:
        step.set(intent="file_task", rule="policy:file_task")
    with observe.step("policy", source="made-up", intent="made-up"):
        pass
    with observe.step("sandbox"):
        pass

    assert value(counted, "pml_execute_runs_total", mode="code", outcome="approval_required") == 1
    assert value(counted, "pml_execute_duration_seconds_count", mode="code") == 1
    decisions = "pml_policy_decisions_total"
    assert value(counted, decisions, source="pml_execute", intent="file_task", outcome="ok") == 1
    assert value(counted, decisions, source=OTHER, intent=OTHER, outcome="ok") == 1
    assert value(counted, "pml_sandbox_runs_total", outcome="ok") == 1
    assert value(counted, "pml_sandbox_run_duration_seconds_count") == 1


def test_the_sandbox_queue_length_is_the_runs_waiting_for_a_worker(counted: StepMetrics) -> None:
    with observe.step("sandbox_wait"), observe.step("sandbox_wait"):
        assert value(counted, "pml_sandbox_queue_length") == 2
    assert value(counted, "pml_sandbox_queue_length") == 0
    assert value(counted, "pml_sandbox_wait_seconds_count") == 2


async def test_a_cancelled_wait_leaves_the_queue(counted: StepMetrics) -> None:
    with anyio.move_on_after(0):
        with observe.step("sandbox_wait"):
            await anyio.sleep_forever()
    assert value(counted, "pml_sandbox_queue_length") == 0


@pytest.mark.parametrize(
    "name",
    ["made_up", "time__now\n", 'x"} 1\n# TYPE', "工具", "\ud800", "pml_execute ", "a" * 5000, ""],
)
def test_a_tool_name_no_gateway_knows_is_counted_as_other(counted: StepMetrics, name: str) -> None:
    with observe.step("tool_call", tool=name, lane="mcp"):
        pass

    assert value(counted, "pml_tool_calls_total", tool=OTHER, lane="mcp", outcome="ok") == 1
    tools = {
        dict(labels)["tool"]
        for sample, labels in samples(counted.registry)
        if "tool" in dict(labels)
    }
    assert tools == {OTHER}


def test_the_gateways_own_and_pass_through_tools_keep_their_names(counted: StepMetrics) -> None:
    for name in ("pml_execute", "time__now"):
        with observe.step("tool_call", tool=name, lane="stdio"):
            pass

    assert value(counted, "pml_tool_calls_total", tool="pml_execute", lane="stdio", outcome="ok")
    assert value(counted, "pml_tool_calls_total", tool="time__now", lane="stdio", outcome="ok")


def test_a_capability_tool_is_named_only_once_a_call_of_it_succeeded(counted: StepMetrics) -> None:
    name = "mcp__fs__copy_note"
    with observe.step("tool_call", tool=name, lane="mcp") as step:
        step.outcome = "tool_error"  # e.g. no such capability: anyone can send the name
    with observe.step("tool_call", tool=name, lane="mcp"):
        pass
    with observe.step("tool_call", tool=name, lane="mcp") as step:
        step.outcome = "tool_error"  # a real one that failed this time

    labels = {"lane": "mcp", "outcome": "tool_error"}
    assert value(counted, "pml_tool_calls_total", tool=OTHER, **labels) == 1
    assert value(counted, "pml_tool_calls_total", tool=name, **labels) == 1
    assert value(counted, "pml_tool_calls_total", tool=name, lane="mcp", outcome="ok") == 1


def test_an_unknown_lane_or_outcome_is_other(counted: StepMetrics) -> None:
    with observe.step("tool_call", tool="time__now", lane="carrier pigeon") as step:
        step.outcome = "not\nan outcome"

    assert value(counted, "pml_tool_calls_total", tool="time__now", lane=OTHER, outcome=OTHER) == 1


def test_each_family_keeps_a_bounded_number_of_label_sets(counted: StepMetrics) -> None:
    limit = metrics.MAX_LABEL_SETS
    for index in range(limit + 500):
        with observe.step("upstream_call", server="big", tool=f"tool_{index}"):
            pass

    found = samples(counted.registry)
    series = {labels for name, labels in found if name == "pml_upstream_calls_total"}
    assert len(series) == limit + 1  # the first ones, then everything else as "other"
    other = {"server": OTHER, "tool": OTHER, "outcome": OTHER}
    assert value(counted, "pml_upstream_calls_total", **other) == 500


def test_label_values_are_cut_and_always_encodable() -> None:
    assert label_value("a" * 1000) == "a" * MAX_LABEL_CHARS
    assert label_value("tool\ud800x").encode("utf-8") == b"tool?x"
    assert label_value("工具") == "工具"


def test_hostile_upstream_tool_names_keep_the_exposition_valid(counted: StepMetrics) -> None:
    hostile = ['a"b', "line\nbreak", "back\\slash", "\ud83d", "é" * 300, "} 1\n# EOF"]
    for name in hostile:
        with observe.step("upstream_call", server="odd", tool=name):
            pass

    found = samples(counted.registry)  # parses: the text stays valid
    tools = {dict(labels)["tool"] for name, labels in found if name == "pml_upstream_calls_total"}
    assert tools == {'a"b', "line\nbreak", "back\\slash", "?", "é" * MAX_LABEL_CHARS, "} 1\n# EOF"}


def test_rate_limit_refusals_and_auth_failures_are_counted_under_bounded_names() -> None:
    process = metrics.process_metrics()
    before = samples(process.registry)

    metrics.count_rate_limited("api")
    metrics.count_rate_limited("a limit\nwith a newline")
    metrics.count_auth_failure("invalid")
    metrics.count_auth_failure("forged reason")

    after = samples(process.registry)

    def grew(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert grew("pml_rate_limit_refusals_total", limit="api") == 1
    assert grew("pml_rate_limit_refusals_total", limit=OTHER) == 1
    assert grew("pml_auth_failures_total", reason="invalid") == 1
    assert grew("pml_auth_failures_total", reason=OTHER) == 1


def test_process_metrics_observe_only_while_a_gateway_is_open() -> None:
    process = metrics.process_metrics()
    names = Names(set(), {})
    already_open = process in observe.observers()

    with metrics.observing(names):
        assert process in observe.observers()
    assert (process in observe.observers()) is already_open


# -- what is read at scrape time --------------------------------------------------------------


def _status(name: str, state: str, sessions: int | None, tools: int = 2) -> ServerStatus:
    extra = {} if sessions is None else {"sessions_opened": sessions}
    return ServerStatus(name, state, "stdio", tools, extra=extra)  # type: ignore[arg-type]


async def test_server_states_and_restarts_are_read_at_scrape_time(db: Database) -> None:
    servers = [
        _status("time", "running", 3),
        _status("git", "failed", 1, tools=0),
        _status("lazy", "idle", None),
        _status('evil"}\nname', "stopped", 0),
    ]
    registry = CollectorRegistry()
    registry.register(GatewayCollector(MetricsSources(lambda: servers, db), PendingApprovals(db)))

    found = samples(registry)

    def of(name: str, **labels: str) -> float | None:
        return found.get((name, frozenset(labels.items())))

    assert of("pml_upstream_server_state", server="time", state="running") == 1
    assert of("pml_upstream_server_state", server="time", state="failed") == 0
    assert of("pml_upstream_server_state", server="git", state="failed") == 1
    assert of("pml_upstream_server_state", server="lazy", state="idle") == 1
    assert of("pml_upstream_server_state", server='evil"}\nname', state="stopped") == 1
    assert of("pml_upstream_restarts_total", server="time") == 2
    assert of("pml_upstream_sessions_opened_total", server="time") == 3
    assert of("pml_upstream_restarts_total", server="git") == 0
    assert of("pml_upstream_restarts_total", server="lazy") is None
    assert of("pml_upstream_tools", server="git") == 0
    assert of("pml_approvals_pending") is None  # not read yet: not made up either
    assert of("pml_db_pool_size", backend=db.dialect) is not None
    assert of("pml_db_pool_connections", backend=db.dialect, state="checked_out") == 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _approval(store: WorkflowStateStore, workflow_id: str, ttl_s: float = 600) -> None:
    await store.put(workflow_id, kind="approval", scope=SCOPE, state={"x": 1}, ttl_s=ttl_s)


async def test_approvals_pending_counts_live_undecided_approvals(db: Database) -> None:
    store = WorkflowStateStore(db)
    await _approval(store, "wf_pending")
    await _approval(store, "wf_decided")
    await store.decide(
        "wf_decided", kind="approval", org="acme", project="webapp", decision="approved", state={}
    )
    await store.put("wf_other", kind="client_run", scope=SCOPE, state={}, ttl_s=600)
    expired = WorkflowStateStore(db, clock=lambda: datetime(2000, 1, 1, tzinfo=UTC))
    await expired.put("wf_expired", kind="approval", scope=SCOPE, state={}, ttl_s=1)

    assert await PendingApprovals(db).refresh() == 1


async def test_approvals_pending_is_read_from_the_database_at_most_once_per_ttl(
    db: Database,
) -> None:
    store = WorkflowStateStore(db)
    clock = Clock()
    pending = PendingApprovals(db, ttl_s=5.0, clock=clock)
    await _approval(store, "wf_1")

    assert await pending.refresh() == 1
    await _approval(store, "wf_2")
    clock.now = 4.9
    async with anyio.create_task_group() as group:  # a burst of scrapes
        for _ in range(20):
            group.start_soon(pending.refresh)
    assert pending.value == 1
    assert pending.reads == 1

    clock.now = 5.1
    assert await pending.refresh() == 2
    assert pending.reads == 2


async def test_approvals_pending_keeps_its_last_count_when_the_database_fails(
    sqlite_url: str,
) -> None:
    db = await Database.open(sqlite_url)
    clock = Clock()
    pending = PendingApprovals(db, ttl_s=5.0, clock=clock)
    await _approval(WorkflowStateStore(db), "wf_1")
    assert await pending.refresh() == 1
    async with db.transaction() as conn:  # the table is gone: every read fails
        await conn.exec_driver_sql("DROP TABLE workflow_state")
    clock.now = 10.0

    assert await pending.refresh() == 1
    assert pending.reads == 2
    await db.close()


def test_the_cli_loads_without_prometheus_client() -> None:
    # Short commands must stay fast: the metrics are imported by the serving gateway only.
    code = "import sys, pml.cli.app; print('prometheus_client' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
