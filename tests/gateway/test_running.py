"""The files by which ``pml reload`` finds serving processes: private, keyed, cleaned up."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from pml.gateway.running import announced, config_key, find_config, running_gateways


def test_a_serving_process_leaves_a_private_file_while_it_runs(tmp_path: Path) -> None:
    directory, config = tmp_path / "run", tmp_path / "pml.toml"
    with announced(directory, config, transport="http 127.0.0.1:8765") as path:
        assert path is not None
        assert path.name == f"{config_key(config)}-{os.getpid()}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert json.loads(path.read_text())["config"] == str(config)
        [found] = running_gateways(directory, config)
        assert (found.pid, found.transport) == (os.getpid(), "http 127.0.0.1:8765")
        assert running_gateways(directory, tmp_path / "other.toml") == []
    assert not path.exists()
    assert running_gateways(directory, config) == []


def test_serving_goes_on_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "run"
    blocked.write_text("a file where the directory should be")
    with announced(blocked, None, transport="stdio") as path:
        assert path is None
    assert running_gateways(blocked, None) == []


def test_a_file_whose_config_differs_from_its_key_is_not_taken(tmp_path: Path) -> None:
    directory, config = tmp_path / "run", tmp_path / "pml.toml"
    with announced(directory, tmp_path / "other.toml", transport="stdio") as path:
        assert path is not None
        # Same key as pml.toml, another config inside: a collision or a forgery.
        path.rename(directory / f"{config_key(config)}-{os.getpid()}.json")
        assert running_gateways(directory, config) == []


def test_the_config_is_named_as_given_on_the_command_line_or_found(tmp_path: Path) -> None:
    assert find_config(Path("a/../pml.toml"), {}, tmp_path) == tmp_path / "pml.toml"
    assert find_config(None, {"PML_CONFIG": "conf/x.toml"}, tmp_path) == tmp_path / "conf/x.toml"
    assert find_config(None, {}, tmp_path) is None
    (tmp_path / "pml.toml").write_text("")
    assert find_config(None, {}, tmp_path) == tmp_path / "pml.toml"
    link = tmp_path / "current.toml"
    link.symlink_to(tmp_path / "pml.toml")
    assert find_config(link, {}, tmp_path) == link  # a reload follows a re-pointed link
