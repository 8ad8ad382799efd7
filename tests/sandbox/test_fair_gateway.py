"""Fair sharing through a real gateway: ``pml_execute`` runs for the caller's (org, project,
user), a second org is not held up by the first, a full share is ``BUSY``, and the answer
says how long the run waited for a worker."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from mcp import Client

from gateway.upstreams import gateway_settings
from pml.config import SandboxSettings
from pml.errors import Busy, ExecutionTimeout
from pml.gateway.schemas import ExecuteParams
from pml.gateway.server import Gateway, open_gateway
from pml.registry.scope import Scope
from pml.sections_limits import LimitsSettings
from pml.telemetry import observe
from pml.telemetry.observe import Step
from pml.upstream.pool import ClientPool

pytestmark = pytest.mark.anyio

NOISY = Scope("noisy-org", "web", "ann")
QUIET = Scope("quiet-org", "web", "bob")
SPIN = "while True:\n    pass"


class SandboxStarts:
    """An observer that counts snippets entering the sandbox and wakes who waits for one."""

    def __init__(self) -> None:
        self.started = 0
        self._changed = anyio.Event()

    def begin(self, step: Step) -> object:
        if step.kind == "sandbox":
            self.started += 1
            self._changed.set()
            self._changed = anyio.Event()
        return None

    def end(self, step: Step, token: object) -> None:
        pass

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(30):
            while self.started < count:
                await self._changed.wait()


@pytest.fixture
async def gateway(sqlite_url: str) -> AsyncGenerator[Gateway]:
    settings = gateway_settings(sqlite_url, expose_upstream=False).model_copy(
        update={
            "sandbox": SandboxSettings(workers=2),  # one tenant holds 1
            "limits": LimitsSettings(queue_per_tenant=0),
        }
    )
    async with open_gateway(settings, pool=ClientPool({})) as gw:
        yield gw


def params(code: str, **extra: Any) -> ExecuteParams:
    return ExecuteParams.model_validate({"intent": "fair sharing test", "code": code, **extra})


async def test_one_org_spinning_leaves_the_other_a_worker_and_is_busy_itself(
    gateway: Gateway,
) -> None:
    starts = SandboxStarts()
    observe.add_observer(starts)
    ended: list[str] = []
    outcomes: dict[str, Any] = {}
    answer: dict[str, Any] = {}

    async def spin() -> None:
        try:
            await gateway.executor.execute(NOISY, params(SPIN, options={"timeout_ms": 3000}))
        except ExecutionTimeout as error:
            outcomes["spin"] = error
        ended.append("spin")

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(spin)
            await starts.wait_for(1)
            with pytest.raises(Busy) as busy:
                await gateway.executor.execute(NOISY, params("return 1"))
            outcomes["busy"] = busy.value
            answer = await gateway.executor.execute(QUIET, params("return 40 + 2"))
            ended.append("quiet")
    finally:
        observe.remove_observer(starts)
    assert ended == ["quiet", "spin"]
    assert answer["status"] == "success"
    assert answer["result"] == 42
    assert 0 <= answer["waitMs"] <= answer["executionTimeMs"]
    assert isinstance(outcomes["busy"], Busy)
    refused = outcomes["busy"].to_dict()
    assert refused["code"] == "BUSY"
    assert refused["retryAfterS"] > 0
    assert isinstance(outcomes["spin"], ExecutionTimeout)


async def test_the_pml_execute_answer_carries_its_wait_for_a_worker(gateway: Gateway) -> None:
    async with Client(gateway.server) as client:
        result = await client.call_tool("pml_execute", {"intent": "add", "code": "return 40 + 2"})
    data = result.structured_content
    assert data is not None
    assert data["result"] == 42
    assert isinstance(data["waitMs"], float)
    assert 0 <= data["waitMs"] <= data["executionTimeMs"]
