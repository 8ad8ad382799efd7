"""Local gateways share one embedding process: two ``pml serve --stdio`` of one user (their
data directory this test's own), real clients, the real model.

Each gateway answers ``pml_discover`` without loading the model itself (no onnxruntime in
its memory map); one ``embed_service`` process serves both, on a 0600 socket in the run
directory; it outlives the gateways (others may come) until it has been idle, and a SIGTERM
ends it with its socket removed. ``model_process = "own"`` keeps the model in the gateway.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from e2e.support import Upstream, pml_stdio, result_json, sqlite_url, write_config
from pml.discovery.minilm import installed_model_dir
from pml.discovery.shared_model import socket_path

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.anyio,
    pytest.mark.skipif(installed_model_dir() is None, reason="model not installed"),
]

INTENT = "what time is it in Tokyo"


def _services(data_home: Path) -> list[int]:
    """The embedding processes of the gateways whose data directory is ``data_home``."""
    expected = socket_path(data_home / "pml" / "run")
    assert expected is not None
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pml.discovery.embed_service" in argv and os.fsencode(expected) in argv:
            found.append(int(entry.name))
    return found


def _socket_of(pid: int) -> Path:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(os.fsdecode(argv[argv.index(b"--socket") + 1]))


def _maps_onnxruntime(pid: int) -> bool:
    return "onnxruntime" in Path(f"/proc/{pid}/maps").read_text()


async def _top(client: object, intent: str) -> list[str]:
    result = await client.call_tool("pml_discover", {"intent": intent})  # type: ignore[attr-defined]
    assert not result.is_error, result
    return [item["name"] for item in result_json(result)["results"]]


async def test_two_stdio_gateways_share_one_embedding_process(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    data_home = tmp_path / "data"
    env = {"XDG_DATA_HOME": str(data_home)}
    configs = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        configs.append(
            write_config(folder / "pml.toml", [servers["time"]], database_url=sqlite_url(folder))
        )
    try:
        async with (
            pml_stdio(configs[0], tmp_path / "one.log", env=env) as first,
            pml_stdio(configs[1], tmp_path / "two.log", env=env) as second,
        ):
            found = [await _top(first.client, INTENT), await _top(second.client, INTENT)]
            assert found[0] == found[1]
            assert found[0][0] == "time:get_current_time"
            services = _services(data_home)
            assert len(services) == 1
            assert not _maps_onnxruntime(first.pid)
            assert not _maps_onnxruntime(second.pid)
            assert _maps_onnxruntime(services[0])
            socket_file = _socket_of(services[0])
            assert socket_file.stat().st_mode & 0o777 == 0o600
        assert _services(data_home) == services  # idle for now: the next gateway uses it
        os.kill(services[0], signal.SIGTERM)
        with anyio.fail_after(10):
            while _services(data_home):  # noqa: ASYNC110 - a process's end has no event
                await anyio.sleep(0.05)
        assert not socket_file.exists()
    finally:
        for pid in _services(data_home):
            os.kill(pid, signal.SIGKILL)


async def test_a_gateway_told_to_keep_its_own_model_starts_no_shared_process(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    data_home = tmp_path / "data"
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"]],
        database_url=sqlite_url(tmp_path),
        extra={"discovery": {"model_process": "own"}},
    )
    async with pml_stdio(config, tmp_path / "own.log", env={"XDG_DATA_HOME": str(data_home)}) as gw:
        assert (await _top(gw.client, INTENT))[0] == "time:get_current_time"
        assert _maps_onnxruntime(gw.pid)
        assert not _services(data_home)
