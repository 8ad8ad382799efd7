"""``GET /ready`` over real HTTP: ready when the database answers at the head revision and
every server was attempted; 503 otherwise; no key needed and no configuration shown."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

import httpx
import pytest

from gateway.test_gateway_http import TIMEOUT
from pml.gateway import readiness as readiness_module
from pml.gateway.http import running_http
from pml.gateway.server import Gateway
from pml.upstream.base import ServerStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def url(gateway: Gateway) -> AsyncGenerator[str]:
    async with running_http(gateway) as served:
        yield served


async def _ready(url: str, method: str = "GET") -> httpx.Response:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        return await http.request(method, f"{url}/ready")


async def test_a_serving_gateway_is_ready_without_a_key(url: str) -> None:
    response = await _ready(url)
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "servers": "ok"},
    }


async def test_a_database_behind_the_code_is_not_ready(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readiness_module, "head_revision", lambda: "9999")
    response = await _ready(url)
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == "behind"


async def test_a_server_still_starting_is_not_ready_and_its_name_is_not_shown(
    url: str, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    statuses = gateway.pool.status()
    starting: list[ServerStatus] = [replace(statuses[0], state="starting"), *statuses[1:]]
    monkeypatch.setattr(gateway.pool, "status", lambda: starting)
    response = await _ready(url)
    assert response.status_code == 503
    assert response.json()["checks"]["servers"] == "starting"
    for status in statuses:
        assert f'"{status.name}"' not in response.text


async def test_an_unreachable_database_is_not_ready_and_recovers(
    url: str, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down() -> str:
        raise OSError("connection refused")

    monkeypatch.setattr(gateway.db, "current_revision", down)
    response = await _ready(url)
    assert response.status_code == 503
    assert response.json()["checks"] == {
        "database": "unreachable",
        "migrations": "unknown",
        "servers": "ok",
    }
    assert "refused" not in response.text
    monkeypatch.undo()
    assert (await _ready(url)).status_code == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_only_get_is_open(url: str, method: str) -> None:
    assert (await _ready(url, method)).status_code in (401, 405)
