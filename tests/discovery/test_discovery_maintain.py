"""The discovery index's background maintenance never ends the gateway: whatever a refresh
raises (a database constraint, a tool source's bug) is logged and tried again later, and
the index serves what it has."""

from __future__ import annotations

import logging

import anyio
import pytest

import pml.discovery.service as discovery_service
from discovery.test_discovery_service import ME, REFERENCE, _model
from pml.discovery.service import DiscoveryService
from pml.registry.models import RoutingRules
from pml.storage.database import Database
from pml.upstream.base import UpstreamTool

pytestmark = pytest.mark.anyio


class FailingTools:
    """The reference tools, after ``failures`` calls that raise an unexpected error."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def list_tools(self) -> list[UpstreamTool]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("a tool source that fails in a way nobody planned")
        return await REFERENCE.list_tools()


async def test_a_failed_first_load_is_logged_and_the_next_round_loads_the_index(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(discovery_service, "STATS_INTERVAL_S", 0.05)
    monkeypatch.setattr(discovery_service, "RECONCILE_INTERVAL_S", 0.0)
    tools = FailingTools(failures=2)  # the load at start and the first round of the loop
    service = DiscoveryService(db, tools, _model(), routing=RoutingRules())
    with caplog.at_level(logging.WARNING, logger="pml.discovery.service"):
        async with service.running():
            with anyio.fail_after(10):
                while tools.calls < 3 or not len(service):  # noqa: ASYNC110 - polling the index
                    await anyio.sleep(0.02)
            results = await service.discover(ME, "what time is it in Paris", kind="tool")
    assert results[0]["name"] == "time:get_current_time"
    assert "discovery index not loaded at start: a tool source that fails" in caplog.text
    assert "discovery index maintenance failed: a tool source that fails" in caplog.text
