"""A config that cannot be used is refused as a whole, with one log line, and the running one
stays in force: unreadable, garbage, deleted, huge, a reserved server name, bad values."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.reloading import (
    CLOCK,
    RELOAD_LOGGER,
    Running,
    base_config,
    config_fixture,  # noqa: F401 - a fixture
    running_fixture,  # noqa: F401 - a fixture
    write,
)
from pml.config import Settings
from pml.gateway.reload import (
    MAX_CONFIG_BYTES,
    Reloader,
    ReloadRequests,
    config_loader,
)

pytestmark = pytest.mark.anyio

REFUSED = "reload refused, the running config stays in force: "


async def assert_refused(
    running: Running, caplog: pytest.LogCaptureFixture, spoil: Callable[[Path], object]
) -> str:
    """Spoil the config file, reload, and check that nothing changed; the refusal's reason."""
    before = running.gateway.settings
    tools, scope = running.gateway.tools, running.gateway.default_scope
    spoil(running.config)
    caplog.clear()
    caplog.set_level(logging.WARNING, logger=RELOAD_LOGGER)

    report = await running.reloader.reload()

    assert report.refused is not None
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == RELOAD_LOGGER]
    assert lines == [(logging.ERROR, REFUSED + report.refused)]  # one clear line
    assert running.gateway.settings is before
    assert not (await tools.call_tool(scope, "a__echo", {"text": "still"})).is_error
    return report.refused


def toml(data: dict[str, Any]) -> Callable[[Path], object]:
    return lambda path: write(path, data)


async def test_invalid_toml_is_refused_with_its_line(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    reason = await assert_refused(
        running, caplog, lambda path: path.write_text('servers = { time = "\n')
    )
    assert "invalid TOML" in reason
    assert "line 1" in reason


async def test_binary_garbage_is_refused(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = bytes(range(256)) * 8 + b"\x00\xff\xfe"
    reason = await assert_refused(running, caplog, lambda path: path.write_bytes(garbage))
    assert "not UTF-8" in reason


async def test_a_deleted_config_is_refused_and_not_taken_for_the_defaults(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    reason = await assert_refused(running, caplog, Path.unlink)
    assert reason == f"config file not found: {running.config}"


async def test_a_huge_config_is_refused_without_being_read(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    def grow(path: Path) -> None:
        with path.open("r+b") as file:
            file.truncate(MAX_CONFIG_BYTES + 1)  # sparse: nothing is written to disk

    reason = await assert_refused(running, caplog, grow)
    assert "more than a config may hold" in reason


async def test_a_directory_in_place_of_the_config_is_refused(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    def replace(path: Path) -> None:
        path.unlink()
        path.mkdir()

    reason = await assert_refused(running, caplog, replace)
    assert reason.endswith("not a regular file")


async def test_a_fifo_in_place_of_the_config_is_refused_without_blocking(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    def replace(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    with anyio.fail_after(5):
        reason = await assert_refused(running, caplog, replace)
    assert reason.endswith("not a regular file")


async def test_an_unreadable_config_is_refused(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    # Root reads any file whatever its mode: a dangling symlink is unreadable for everyone.
    def dangle(path: Path) -> None:
        path.unlink()
        path.symlink_to(path.with_name("nowhere.toml"))

    reason = await assert_refused(running, caplog, dangle)
    assert reason == f"config file not found: {running.config}"


async def test_a_server_renamed_to_the_reserved_name_is_refused_and_the_old_one_stays(
    running: Running, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await running.reload_with(base_config(sqlite_url, servers={"clock": CLOCK}))
    reason = await assert_refused(
        running, caplog, toml(base_config(sqlite_url, servers={"pml": CLOCK}))
    )
    assert "'pml' is reserved" in reason
    result = await running.gateway.tools.call_tool(
        running.gateway.default_scope, "clock__get_current_time", {"timezone": "UTC"}
    )
    assert not result.is_error


@pytest.mark.parametrize(
    ("more", "expected"),
    [
        ({"servers": "time"}, "servers"),
        ({"servers": {"clock": {"args": ["x"]}}}, "needs 'command'"),
        ({"servers": {"\u202eevil": CLOCK}}, "control or invisible characters"),
        ({"servers": {"x" * 65: CLOCK}}, "65 characters long"),
        ({"sandbox": {"max_tool_calls": -1}}, "sandbox.max_tool_calls"),
        ({"sandbox": {"wall_time_s": "forever"}}, "sandbox.wall_time_s"),
        ({"policy": {"mode": "lenient"}}, "policy.mode"),
        ({"routing": {"cloud": 3}}, "routing.cloud"),
        ({"surprise": True}, "unknown key"),
        ({"permissions": {"deny": ["no-colon-here"]}}, "no-colon-here"),
        ({"permissions": {"allow": ["fs:[z-a]"]}}, "fs:[z-a]"),
        ({"policy": {"capabilities": {"a:*": "teleport"}}}, "policy.capabilities"),
    ],
)
async def test_bad_values_are_refused_as_a_whole(
    running: Running,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
    more: dict[str, Any],
    expected: str,
) -> None:
    # Each bad value comes with a good change, which must not be applied either.
    rest = dict(more)
    permissions = {"allow": ["*:*"], "deny": ["a:echo"], **rest.pop("permissions", {})}
    data = base_config(sqlite_url, **rest, permissions=permissions)
    reason = await assert_refused(running, caplog, toml(data))
    assert expected in reason


async def test_a_config_that_does_not_come_in_time_is_refused(running: Running) -> None:
    stuck = threading.Event()

    def hang() -> Settings:
        stuck.wait(10)
        raise AssertionError("never reached in time")

    reloader = Reloader(running.gateway, hang, load_timeout_s=0.2)
    try:
        report = await reloader.reload()
    finally:
        stuck.set()  # let the abandoned thread end
    assert report.refused == "the config was not read within 0.2 s"


async def test_a_reload_that_fails_unexpectedly_is_logged_and_the_next_one_works(
    running: Running, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    load = config_loader(running.config, environ={}, cwd=running.config.parent)
    calls = 0

    def flaky() -> Settings:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("disk on fire")
        return load()

    reloader = Reloader(running.gateway, flaky)
    requests = ReloadRequests()
    write(running.config, base_config(sqlite_url, permissions={"allow": ["*:*"], "deny": ["a:*"]}))
    async with reloader.serving(requests):
        requests.request()
        with anyio.fail_after(10):
            while not any("reload failed" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        requests.request()
        with anyio.fail_after(10):
            while reloader.reloads < 1:  # noqa: ASYNC110 - the count has no event
                await anyio.sleep(0.01)
    assert running.gateway.settings.permissions.deny == ["a:*"]


def test_the_loader_keeps_the_environment_it_was_given(tmp_path: Path, sqlite_url: str) -> None:
    path = write(tmp_path / "pml.toml", base_config(sqlite_url))
    environ = {"PML_SANDBOX__MAX_TOOL_CALLS": "7"}
    load = config_loader(path, environ=environ, cwd=tmp_path)
    environ["PML_SANDBOX__MAX_TOOL_CALLS"] = "8"  # later changes are not the start's
    assert load().sandbox.max_tool_calls == 7
