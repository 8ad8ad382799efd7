"""The observation point: what observers see of a step, and that they never change it."""

from __future__ import annotations

from collections.abc import Generator

import anyio
import pytest

from pml.errors import NotFound
from pml.telemetry import observe
from pml.telemetry.observe import Step


class Recorder:
    def __init__(self) -> None:
        self.begun: list[tuple[str, dict[str, str]]] = []
        self.ended: list[tuple[str, str, float]] = []

    def begin(self, step: Step) -> object:
        self.begun.append((step.kind, dict(step.attributes)))
        return len(self.begun)

    def end(self, step: Step, token: object) -> None:
        assert token == len(self.begun)
        self.ended.append((step.kind, step.outcome, step.duration_s))


class Broken:
    def begin(self, step: Step) -> object:
        raise RuntimeError("begin broke")

    def end(self, step: Step, token: object) -> None:
        raise RuntimeError("end broke")


@pytest.fixture
def recorder() -> Generator[Recorder]:
    watching = Recorder()
    observe.add_observer(watching)
    try:
        yield watching
    finally:
        observe.remove_observer(watching)


def test_an_observer_sees_a_step_begin_and_end_with_its_attributes(recorder: Recorder) -> None:
    with observe.step("upstream_call", server="time", tool="now") as step:
        step.set(extra="x")
    assert recorder.begun == [("upstream_call", {"server": "time", "tool": "now"})]
    kind, outcome, duration = recorder.ended[0]
    assert (kind, outcome) == ("upstream_call", "ok")
    assert duration >= 0


def test_an_outcome_set_inside_the_block_is_what_observers_see(recorder: Recorder) -> None:
    with observe.step("tool_call", tool="t") as step:
        step.outcome = "tool_error"
    assert recorder.ended[0][1] == "tool_error"


def test_a_pml_error_ends_the_step_with_its_code_and_goes_on_unchanged(
    recorder: Recorder,
) -> None:
    error = NotFound("no such capability")
    with pytest.raises(NotFound) as raised, observe.step("execute", mode="capability"):
        raise error
    assert raised.value is error
    assert recorder.ended[0][1] == "NOT_FOUND"


def test_other_failures_end_as_timeout_or_error(recorder: Recorder) -> None:
    with pytest.raises(TimeoutError), observe.step("upstream_call"):
        raise TimeoutError
    with pytest.raises(ValueError, match="bad"), observe.step("upstream_call"):
        raise ValueError("bad")
    assert [outcome for _, outcome, _ in recorder.ended] == ["timeout", "error"]


@pytest.mark.anyio
async def test_a_cancelled_step_ends_as_cancelled(recorder: Recorder) -> None:
    with anyio.move_on_after(0.01):
        with observe.step("sandbox_wait"):
            await anyio.sleep_forever()
    assert recorder.ended[0][1] == "cancelled"


def test_a_broken_observer_never_changes_the_step_nor_hides_it_from_others(
    recorder: Recorder,
) -> None:
    broken = Broken()
    observe.add_observer(broken)
    try:
        with observe.step("policy", source="pml_execute") as step:
            step.outcome = "ok"
            value = 42
    finally:
        observe.remove_observer(broken)
    assert value == 42
    assert recorder.ended[0][:2] == ("policy", "ok")


def test_observers_are_added_once_and_removed(recorder: Recorder) -> None:
    observe.add_observer(recorder)
    assert observe.observers().count(recorder) == 1
    observe.remove_observer(recorder)
    with observe.step("sandbox"):
        pass
    assert recorder.ended == []
    observe.add_observer(recorder)  # the fixture removes it again
