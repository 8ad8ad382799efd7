"""Automatic suggest runs after N new unnamed captures (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator

import anyio
import anyio.to_thread
import pytest
from pydantic import ValidationError

from curation.llm_stub import LlmStub
from pml.curation import CurationService
from pml.curation.auto import AUTO_USER, AutoRuns
from pml.llm import LlmClient
from pml.registry.changes import UNNAMED_CAPTURE, CapabilityChange
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.sections import CurationSettings
from pml.storage.curation_repo import SqlCurationRepository
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

AFTER = 3


async def capture(registry: CapabilityRegistry, scope: Scope, index: int) -> None:
    draft = CapabilityDraft(
        code=f"return {index}", intent=f"read config number {index}", tools_used=["filesystem:r"]
    )
    await registry.capture(scope, draft, latency_ms=1.0)


async def runs(db: Database, scope: Scope) -> list[tuple[str, str, int]]:
    async with db.read() as conn:
        found = await SqlCurationRepository(conn).recent_runs(scope.org, scope.project)
    return [(run.trigger, run.mode, len(run.suggestions)) for run in found]


def service(
    registry: CapabilityRegistry, db: Database, llm: LlmClient | None = None
) -> CurationService:
    # no minimum interval here: these tests are about what is counted (spacing: below)
    settings = CurationSettings(auto_suggest_after=AFTER, auto_suggest_interval_s=0)
    curation = CurationService(registry, db, settings=settings, llm=llm)
    registry.on_change(curation.capability_changed)
    return curation


@pytest.fixture
async def curation(registry: CapabilityRegistry, db: Database) -> AsyncGenerator[CurationService]:
    curation = service(registry, db)
    async with curation.running():
        yield curation


async def test_a_suggest_run_starts_after_n_unnamed_captures(
    registry: CapabilityRegistry, db: Database, curation: CurationService, scope: Scope
) -> None:
    for index in range(AFTER - 1):
        await capture(registry, scope, index)
    with anyio.fail_after(10):
        await curation.settled()
    assert await runs(db, scope) == []

    await capture(registry, scope, AFTER)
    with anyio.fail_after(10):
        await curation.settled()

    assert await runs(db, scope) == [("auto", "suggest", AFTER)]
    page = await registry.counts(scope)
    assert page["unnamed"] == AFTER  # suggest renamed nothing


async def test_the_count_restarts_after_each_run(
    registry: CapabilityRegistry, db: Database, curation: CurationService, scope: Scope
) -> None:
    for index in range(AFTER * 2 + 1):
        await capture(registry, scope, index)
        with anyio.fail_after(10):
            await curation.settled()

    assert await runs(db, scope) == [("auto", "suggest", AFTER * 2), ("auto", "suggest", AFTER)]


async def test_a_manual_suggest_run_also_restarts_the_count(
    registry: CapabilityRegistry, db: Database, curation: CurationService, scope: Scope
) -> None:
    for index in range(AFTER - 1):
        await capture(registry, scope, index)
    await curation.call(scope, {"mode": "suggest"})
    await capture(registry, scope, 99)
    with anyio.fail_after(10):
        await curation.settled()

    assert [trigger for trigger, _, _ in await runs(db, scope)] == ["manual"]


async def test_the_count_comes_from_the_database_so_it_survives_a_restart(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    for index in range(AFTER - 1):  # captured while no gateway was curating
        await capture(registry, scope, index)
    restarted = CapabilityRegistry(db)
    curation = service(restarted, db)

    async with curation.running():
        await capture(restarted, scope, 42)
        with anyio.fail_after(10):
            await curation.settled()

    assert await runs(db, scope) == [("auto", "suggest", AFTER)]


async def test_each_project_counts_its_own_captures(
    registry: CapabilityRegistry, db: Database, curation: CurationService, scope: Scope
) -> None:
    other = Scope(scope.org, "other-project", scope.user)
    for index in range(AFTER - 1):
        await capture(registry, scope, index)
        await capture(registry, other, index)
    with anyio.fail_after(10):
        await curation.settled()

    assert await runs(db, scope) == await runs(db, other) == []


async def test_a_capture_does_not_wait_for_the_run_and_one_run_per_project_at_a_time(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    with LlmStub() as stub:
        stub.hang = True  # the run's LLM request never answers until the stub closes
        llm = LlmClient(base_url=stub.base_url, model="m", timeout_s=20)
        curation = service(registry, db, llm)
        async with curation.running(), llm:
            with anyio.fail_after(10):
                for index in range(AFTER):
                    await capture(registry, scope, index)
                assert await anyio.to_thread.run_sync(stub.received.wait, 10)
                for index in range(AFTER, AFTER * 2):  # these return while the run is stuck
                    await capture(registry, scope, index)
            assert len(stub.requests) == 1
            assert curation._auto.runs_started == 1  # pyright: ignore[reportPrivateUsage]
            stub.release()
            with anyio.fail_after(30):
                await curation.settled()

    # the captures made during the first run count for the next one
    assert [trigger for trigger, _, _ in await runs(db, scope)] == ["auto", "auto"]


async def test_a_failing_run_is_logged_and_never_reaches_the_capture(
    registry: CapabilityRegistry, db: Database, scope: Scope, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_scope: Scope) -> None:
        raise RuntimeError("boom")

    auto = AutoRuns(db, broken, after=1)
    registry.on_change(auto.capability_changed)

    async with auto.running():
        await capture(registry, scope, 1)
        with anyio.fail_after(10):
            await auto.settled()

    assert auto.runs_started == 1
    assert "automatic curation of acme.webapp failed" in caplog.text
    assert (await registry.counts(scope))["unnamed"] == 1


async def test_nothing_runs_when_disabled_or_outside_running(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    disabled = CurationService(registry, db, settings=CurationSettings(auto_suggest_after=0))
    idle = service(registry, db)  # never entered running()
    registry.on_change(disabled.capability_changed)

    async with disabled.running():
        for index in range(AFTER + 1):
            await capture(registry, scope, index)
        await disabled.settled()
    await idle.settled()

    assert await runs(db, scope) == []


async def test_only_unnamed_captures_schedule_a_check(db: Database) -> None:
    started: list[Scope] = []

    async def record(scope: Scope) -> None:
        started.append(scope)

    auto = AutoRuns(db, record, after=1)
    async with auto.running():
        await auto.capability_changed(CapabilityChange("acme", "web", "x", "renamed", "o"))
        await auto.settled()
        assert started == []
        await auto.capability_changed(CapabilityChange("acme", "web", "x", UNNAMED_CAPTURE, "o"))
        await auto.settled()

    assert started == []  # the database holds no unnamed capability of acme.web
    assert AUTO_USER == "pml-curation"


async def test_a_stream_of_captures_is_counted_once_a_recheck_interval(db: Database) -> None:
    started: list[Scope] = []

    async def record(scope: Scope) -> None:
        started.append(scope)

    auto = AutoRuns(db, record, after=1, recheck_s=0.5)
    change = CapabilityChange("acme", "web", "x", UNNAMED_CAPTURE, "o")
    async with auto.running():
        with anyio.fail_after(20):
            for _ in range(120):  # a capture heard every 10 ms for ~1.2 s
                await auto.capability_changed(change)
                await anyio.sleep(0.01)
            await auto.settled()

    # one check every 0.5 s at most (without the interval: one per capture heard, ~100)
    assert 2 <= auto.checks <= 5
    assert started == []  # nothing unnamed in acme.web's database


async def test_a_projects_automatic_runs_are_spaced_and_captures_meanwhile_count_towards_the_next(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    started: list[float] = []

    async def record(_scope: Scope) -> None:
        started.append(anyio.current_time())

    # nothing records a run, so every check finds the project due: only the interval spaces them
    auto = AutoRuns(db, record, after=1, recheck_s=0.05, min_interval_s=0.6)
    registry.on_change(auto.capability_changed)
    async with auto.running():
        with anyio.fail_after(20):
            first = anyio.current_time()
            for index in range(30):  # a capture every 40 ms or more
                await capture(registry, scope, index)
                await anyio.sleep(0.04)
            streamed = anyio.current_time() - first
            await auto.settled()

    # without the interval: about one run per recheck (0.05 s) while captures kept coming
    assert 2 <= len(started) <= streamed / 0.6 + 2
    gaps = [later - earlier for earlier, later in itertools.pairwise(started)]
    assert min(gaps) >= 0.59


def test_the_interval_setting_refuses_what_is_not_a_duration() -> None:
    assert CurationSettings().auto_suggest_interval_s == 60.0
    for bad in (-1, float("nan"), float("inf"), 86_401, "soon", None):
        with pytest.raises(ValidationError):
            CurationSettings(auto_suggest_interval_s=bad)  # pyright: ignore[reportArgumentType]
