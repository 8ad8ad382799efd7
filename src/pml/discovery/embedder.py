"""The embedding seam of discovery: texts in, unit vectors out.

    embedder = load_embedder("auto")          # MiniLM when installed and intact, else hashing
    vectors = embedder.embed(["read a file", "list open pull requests"])   # (2, dim) float32
    scores = vectors @ embedder.embed(["open a file"])[0]                  # cosine similarity

``Embedder`` is the Protocol discovery codes against. ``load_embedder`` picks the
implementation from the ``[discovery] embedder`` setting: ``"auto"`` loads the MiniLM model
(``pml.discovery.minilm``) when its package is installed and its files match the pinned
digests, and otherwise logs a warning and returns ``HashingEmbedder``; ``"minilm"`` raises
``ConfigError`` instead of falling back; ``"hashing"`` never touches the model. The model is
loaded once per process and directory. Embedding is synchronous CPU work: async callers run
it in a worker thread. ``model_id`` names the vector space: vectors with different ids must
never be compared, so a stored index is rebuilt when it changes.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from pml.discovery.minilm import (
    DIM,
    INSTALL_COMMAND,
    MODEL_ID,
    MiniLmEmbedder,
    checked_model,
    minilm_from,
    model_files,
)
from pml.discovery.text import stem, words
from pml.errors import ConfigError

if TYPE_CHECKING:
    from pml.discovery.shared_model import SharedModel

__all__ = [
    "INSTALL_COMMAND",
    "DeferredMiniLm",
    "Embedder",
    "EmbedderChoice",
    "HashingEmbedder",
    "MiniLmEmbedder",
    "load_embedder",
]

logger = logging.getLogger(__name__)

EmbedderChoice = Literal["auto", "minilm", "hashing"]


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of one fixed space (``model_id``)."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Shape ``(len(texts), dim)``; each row has norm 1, or is 0 for a text with no tokens."""
        ...


# --- the deterministic fallback -----------------------------------------------------------

HASHING_DIM: Final = 384
_TRIGRAM_WEIGHT: Final = 0.35
# Function words still count (a text of only "the" is not empty), but barely.
_FUNCTION_WORDS = (
    "a an and are as at be by for from in into is it me my of on or so that the this to with"
)
_STOPWORDS: Final = frozenset(_FUNCTION_WORDS.split())
_STOPWORD_WEIGHT: Final = 0.1


@lru_cache(maxsize=262144)
def _features(word: str, dim: int) -> tuple[tuple[int, float], ...]:
    """(index, signed weight) pairs of one word: its stem and its character trigrams."""
    if word in _STOPWORDS:
        return (_bucket("w:" + word, _STOPWORD_WEIGHT, dim),)
    padded = f"<{word}>"
    grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
    out = [_bucket("w:" + stem(word), 1.0, dim)]
    out += [_bucket("t:" + gram, _TRIGRAM_WEIGHT, dim) for gram in grams]
    return tuple(out)


def _bucket(feature: str, weight: float, dim: int) -> tuple[int, float]:
    # blake2b, not hash(): the same feature lands in the same bucket in every process.
    value = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
    return (value >> 1) % dim, weight if value & 1 else -weight


class HashingEmbedder:
    """Feature hashing of words, stems and character trigrams: no model, no dependencies.

    Deterministic across processes and machines; it matches shared words and word pieces
    (``read_file`` ~ "reads files"), not meaning ("fetch" is not "download").
    """

    model_id: str = f"hashing/{HASHING_DIM}/1"
    dim: int = HASHING_DIM

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One L2-normalised row per text; a zero row for a text with no word tokens."""
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            vector = out[row]
            for word in words(text):
                for index, weight in _features(word, self.dim):
                    vector[index] += weight
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out.astype(np.float32)


# --- choosing and caching -------------------------------------------------------------------

_lock = threading.Lock()
# A directory's model, or why it could not be loaded (so a broken one is read only once).
_loaded: dict[tuple[Path, ...], DeferredMiniLm | str] = {}


def load_embedder(
    choice: EmbedderChoice = "auto", *, model_dir: Path | None = None, shared_in: Path | None = None
) -> Embedder:
    """The embedder the ``[discovery] embedder`` setting asks for (``model_dir``: tests).

    The model's files are found and checked now; its runtime is built on the first
    ``embed`` (a worker thread, in the background of a starting gateway). ``shared_in``: a
    run directory whose shared embedding process serves the installed model
    (``shared_model``); this process builds its own only if that one cannot be used."""
    if choice == "hashing":
        return HashingEmbedder()
    try:
        if shared_in is not None and model_dir is None:
            shared = _shared(shared_in)
            if shared is not None:
                return shared
        return _minilm(model_dir)
    except ConfigError as exc:
        if choice == "minilm":
            raise
        logger.warning("Discovery falls back to the hashing embedder (lower quality). %s", exc)
        return HashingEmbedder()


class DeferredMiniLm:
    """The checked MiniLM model, built into an onnxruntime session on first use."""

    model_id: str = MODEL_ID
    dim: int = DIM

    def __init__(self, model_bytes: bytes, tokenizer_bytes: bytes) -> None:
        self._files: tuple[bytes, bytes] | None = (model_bytes, tokenizer_bytes)
        self._model: MiniLmEmbedder | None = None
        self._building = threading.Lock()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """See ``Embedder.embed`` (the first call builds the model: ~0.3 s)."""
        return self.model().embed(texts)

    def model(self) -> MiniLmEmbedder:
        """The ready model (built now if it is not yet)."""
        model = self._model
        if model is None:
            with self._building:
                if self._model is None:
                    assert self._files is not None
                    self._model = minilm_from(*self._files)
                    self._files = None  # the session holds what it needs
                model = self._model
        return model


def _minilm(model_dir: Path | None) -> DeferredMiniLm:
    """The model of ``model_dir`` (default: the installed packages), checked once per process."""
    key = tuple(path.resolve() for path in model_files(model_dir))  # ConfigError if missing
    with _lock:
        loaded = _loaded.get(key)
        if loaded is None:
            try:
                loaded = DeferredMiniLm(*checked_model(model_dir))
            except ConfigError as exc:
                loaded = exc.message
            _loaded[key] = loaded
    if isinstance(loaded, str):
        raise ConfigError(loaded)
    return loaded


_shared_models: dict[Path, SharedModel] = {}


def _shared(run_dir: Path) -> SharedModel | None:
    """The installed model served from ``run_dir`` (checked here like the process's own;
    None when no socket path fits there)."""
    from pml.discovery.shared_model import SharedModel, socket_path

    path = socket_path(run_dir)
    if path is None:
        return None
    with _lock:
        model = _shared_models.get(path)
        if model is None:
            checked_model()  # ConfigError if missing or modified; the bytes are not kept
            model = SharedModel(path, own=lambda: _minilm(None))
            _shared_models[path] = model
    return model
