"""The embedders: shapes, determinism, batching, meaning, odd input, integrity checks.

The MiniLM tests need the model's package (a dependency of PML: any install brings it);
without it they skip and say so outside CI, and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import numpy as np
import pytest
from numpy.typing import NDArray

from pml.discovery.embedder import (
    INSTALL_COMMAND,
    DeferredMiniLm,
    Embedder,
    HashingEmbedder,
    MiniLmEmbedder,
    load_embedder,
    stem,
    words,
)
from pml.discovery.minilm import BUNDLED_TOKENIZER, MODEL_FILE, installed_model_dir
from pml.errors import ConfigError

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

MIXED = [
    "read a file",
    "",
    "Read the complete contents of a file from the file system as text, with encodings",
    "list open pull requests",
    "get the current time in a timezone and convert it to another one " * 6,
    "x",
    "mcp__filesystem__read_text_file",
]
ODD = [
    "deploy 🚀 the service now 🎉",
    "قراءة ملف من القرص",  # Arabic, right to left
    "ファイルを読み込む",
    "a\x00b\x00c",
    "Ünïcödé façade naïve café",
    "x" * 5000,  # one very long token
    "zero\u200bwidth\u202eoverride",
]


def _model_or_skip() -> MiniLmEmbedder:
    embedder = load_embedder("auto")
    if isinstance(embedder, HashingEmbedder):
        if IN_CI:
            pytest.fail(f"CI needs the MiniLM model: {INSTALL_COMMAND}")
        pytest.skip(f"the MiniLM model is not installed ({INSTALL_COMMAND})")
    assert isinstance(embedder, DeferredMiniLm)
    return embedder.model()


@pytest.fixture(params=["hashing", "minilm"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return HashingEmbedder() if request.param == "hashing" else _model_or_skip()


@pytest.fixture
def model() -> MiniLmEmbedder:
    return _model_or_skip()


@pytest.fixture
def model_copy(tmp_path: Path) -> Path:
    """A directory holding copies of the installed model.onnx and tokenizer.json."""
    _model_or_skip()
    model_dir = installed_model_dir()
    assert model_dir is not None
    shutil.copy(model_dir / MODEL_FILE, tmp_path / MODEL_FILE)
    shutil.copy(BUNDLED_TOKENIZER, tmp_path / "tokenizer.json")
    return tmp_path


def _cosine(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    return float(a @ b)


def test_embed_returns_one_unit_float32_row_per_text(embedder: Embedder) -> None:
    vectors = embedder.embed(MIXED)
    assert vectors.shape == (len(MIXED), embedder.dim)
    assert vectors.dtype == np.float32
    norms = np.linalg.norm(vectors, axis=1)
    assert norms[1] == 0  # the empty text
    np.testing.assert_allclose(np.delete(norms, 1), 1, atol=1e-5)
    assert embedder.embed([]).shape == (0, embedder.dim)


def test_the_same_text_gives_the_same_vector_every_time(embedder: Embedder) -> None:
    first = embedder.embed(MIXED)
    assert np.array_equal(first, embedder.embed(MIXED))
    assert np.array_equal(first[0], embedder.embed([MIXED[0]])[0])


def test_a_batch_equals_its_texts_embedded_one_by_one(embedder: Embedder) -> None:
    # Lengths from 1 to ~120 words, more texts than one forward pass takes, so rows are
    # padded to different lengths in different passes.
    texts = [" ".join(MIXED[i % len(MIXED)].split()[: 1 + (i * 7) % 40]) for i in range(70)]
    texts += [MIXED[4] * 3, *ODD]
    batch = embedder.embed(texts)
    one_by_one = np.stack([embedder.embed([text])[0] for text in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)


def test_text_with_no_tokens_embeds_to_a_zero_row(embedder: Embedder) -> None:
    vectors = embedder.embed(["", "   \n\t  ", "\x00\x00", "\u200b"])
    assert not vectors.any()


def test_odd_unicode_and_control_characters_embed_to_unit_rows(embedder: Embedder) -> None:
    vectors = embedder.embed(ODD)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.isfinite(vectors).all()


@pytest.mark.parametrize(
    ("query", "near", "far"),
    [
        (
            "read a file from disk",
            "Read the complete contents of a file from the file system",
            "Get the current time in a timezone",
        ),
        (
            "what time is it in Tokyo",
            "Get the current time in a specific IANA timezone",
            "Create a new directory or ensure that it exists",
        ),
        (
            "show me the changes I staged",
            "git_diff_staged: Shows changes that are staged for commit",
            "Search for files matching a glob pattern",
        ),
        (
            "save a note about a person to memory",
            "Create entities with observations in the knowledge graph memory",
            "Fetch a URL from the internet and extract its contents as markdown",
        ),
        (
            "download a web page",
            "Fetch a URL from the internet and extract its contents as markdown",
            "Move or rename files and directories",
        ),
    ],
)
def test_the_model_puts_a_query_nearer_the_tool_that_does_it(
    model: MiniLmEmbedder, query: str, near: str, far: str
) -> None:
    q, n, f = model.embed([query, near, far])
    assert _cosine(q, n) > _cosine(q, f) + 0.1


def test_ten_thousand_words_are_truncated_to_the_first_256_tokens(model: MiniLmEmbedder) -> None:
    text = " ".join(f"word{i % 97} alpha beta" for i in range(3334))  # ~10 000 words
    long, head = model.embed([text, " ".join(text.split()[:1000])])
    np.testing.assert_allclose(long, head, atol=1e-6)
    assert abs(np.linalg.norm(long) - 1) < 1e-5


@pytest.mark.anyio
async def test_concurrent_callers_in_worker_threads_get_the_same_vectors(
    model: MiniLmEmbedder,
) -> None:
    texts = [f"{text} {i}" for i, text in enumerate(MIXED * 3)]
    expected = model.embed(texts)
    results: dict[int, NDArray[np.float32]] = {}

    async def one(i: int) -> None:
        results[i] = await anyio.to_thread.run_sync(model.embed, [texts[i]])

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for i in range(len(texts)):
                group.start_soon(one, i)
    got = np.concatenate([results[i] for i in range(len(texts))])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_the_model_is_loaded_once_per_process(model: MiniLmEmbedder) -> None:
    for choice in ("minilm", "auto"):
        loaded = load_embedder(choice)
        assert isinstance(loaded, DeferredMiniLm)
        assert loaded.model() is model


def test_a_model_directory_with_the_same_files_gives_the_same_vectors(
    model: MiniLmEmbedder, model_copy: Path
) -> None:
    copied = load_embedder("minilm", model_dir=model_copy)
    assert copied is not model
    assert np.array_equal(copied.embed(MIXED), model.embed(MIXED))


def test_a_changed_model_file_makes_auto_fall_back_to_hashing(
    model_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = model_copy / MODEL_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pml.discovery.embedder"):
        embedder = load_embedder("auto", model_dir=model_copy)
    assert isinstance(embedder, HashingEmbedder)
    assert "SHA-256" in caplog.text
    assert INSTALL_COMMAND in caplog.text
    with pytest.raises(ConfigError, match="SHA-256") as raised:
        load_embedder("minilm", model_dir=model_copy)
    assert INSTALL_COMMAND in raised.value.message


def test_a_missing_model_means_hashing_under_auto_and_an_error_under_minilm(
    tmp_path: Path,
) -> None:
    assert isinstance(load_embedder("auto", model_dir=tmp_path), HashingEmbedder)
    with pytest.raises(ConfigError, match="not available") as raised:
        load_embedder("minilm", model_dir=tmp_path)
    assert raised.value.code == "CONFIG_ERROR"
    assert INSTALL_COMMAND in raised.value.message


def test_the_hashing_choice_never_loads_the_model(tmp_path: Path) -> None:
    embedder = load_embedder("hashing", model_dir=tmp_path)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.model_id.startswith("hashing/")


def test_hashing_splits_identifiers_and_strips_common_suffixes() -> None:
    assert words("mcp__fs__read_text-file readFile HTTPServer v2") == [
        "mcp",
        "fs",
        "read",
        "text",
        "file",
        "read",
        "file",
        "http",
        "server",
        "v2",
    ]
    assert {stem(w) for w in ("files", "file")} == {"file"}
    assert {stem(w) for w in ("create", "created", "creating")} == {"creat"}
    assert {stem(w) for w in ("entries", "entry")} == {"entry"}
    assert stem("status") == "status"


def test_hashing_puts_texts_sharing_words_nearer_than_unrelated_ones() -> None:
    q, near, far = HashingEmbedder().embed(
        ["reading files", "read_file: Read the complete contents of a file", "get_current_time"]
    )
    assert _cosine(q, near) > 0.3
    assert _cosine(q, near) > _cosine(q, far) + 0.2


def test_hashing_vectors_are_the_same_in_another_process() -> None:
    code = (
        "import json, sys; from pml.discovery.embedder import HashingEmbedder; "
        "sys.stdout.write(HashingEmbedder().embed(json.load(sys.stdin)).tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([*MIXED, *ODD]),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    theirs = np.frombuffer(bytes.fromhex(done.stdout), dtype=np.float32)
    ours = HashingEmbedder().embed([*MIXED, *ODD])
    assert np.array_equal(theirs.reshape(ours.shape), ours)


def test_choosing_the_model_does_not_build_its_runtime() -> None:
    """A starting gateway checks the model's files but builds the onnxruntime session only
    when it first embeds (in the background), so ``initialize`` never waits for it."""
    _model_or_skip()
    code = (
        "import sys\n"
        "from pml.discovery.embedder import DeferredMiniLm, load_embedder\n"
        "embedder = load_embedder('minilm')\n"
        "assert isinstance(embedder, DeferredMiniLm)\n"
        "print('onnxruntime' in sys.modules)\n"
        "embedder.embed(['list the files'])\n"
        "print('onnxruntime' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
