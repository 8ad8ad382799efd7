"""Latency and throughput of the discovery embedder.

    python benchmarks/embeddings.py [--queries 400] [--batch 256] [--embedder auto] [--shared]

Loads the embedder (``load_embedder``; ``auto`` is the MiniLM model when installed; the load
time includes building its runtime), then embeds short discovery queries (5-15 words, all
different) one at a time, and a batch of tool descriptions (~30 words each) in one call. The
hashing fallback is timed on the same queries. Prints one JSON object: {"model_id", "dim",
"load_ms", "query_p50_ms", "query_p95_ms", "batch_texts_per_s", "rss_start_mb",
"rss_loaded_mb", "rss_after_batch_mb", "hashing_query_p50_ms", ...}; the RSS values are
the whole process's (Linux only, else null). ``--shared``: through the shared embedding
process (``model_process = "shared"``), started in a temporary run directory (the load time
is its start; it stops by itself once idle).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, cast

from pml.discovery.embedder import DeferredMiniLm, Embedder, HashingEmbedder, load_embedder
from pml.discovery.shared_model import SharedModel

_VERBS = (
    "read",
    "write",
    "list",
    "delete",
    "search",
    "create",
    "update",
    "fetch",
    "send",
    "convert",
    "compare",
    "summarize",
    "find",
    "rename",
    "download",
    "upload",
    "parse",
    "validate",
    "schedule",
    "translate",
)
_OBJECTS = (
    "a file from disk",
    "the contents of a directory",
    "open pull requests in the repository",
    "the current time in Tokyo",
    "an email to the team",
    "a JSON document",
    "rows in a database table",
    "the latest commit message",
    "a web page as markdown",
    "calendar events for next week",
    "issues assigned to me",
    "a memory note about the project",
    "environment variables of the server",
    "a CSV file into JSON",
    "logs from the last hour",
    "an image thumbnail",
    "the git diff of staged changes",
    "the weather forecast for Paris",
    "entities in the knowledge graph",
    "a message in a Slack channel",
)
_QUALIFIERS = (
    "",
    "quickly",
    "and save the result",
    "for the current user",
    "without overwriting anything",
    "in the background please",
    "using the filesystem server",
    "then show me a short summary",
)
_SUBJECTS = (
    ("file", "the file system", "text encodings"),
    ("directory listing", "a folder", "hidden entries"),
    ("commit", "a git repository", "branch names"),
    ("pull request", "a GitHub project", "review comments"),
    ("time zone conversion", "the IANA database", "daylight saving rules"),
    ("web page", "a URL", "HTML and markdown"),
    ("memory entity", "the knowledge graph", "relations and observations"),
    ("database row", "a SQL table", "typed columns"),
    ("email", "a mailbox", "attachments and threads"),
    ("calendar event", "a shared calendar", "recurring meetings"),
    ("log line", "the server logs", "severity levels"),
    ("image", "an uploaded picture", "common formats like PNG"),
    ("issue", "the bug tracker", "labels and assignees"),
    ("message", "a chat channel", "mentions and reactions"),
    ("document", "a JSON store", "nested fields"),
    ("secret", "the vault", "access policies"),
)
_ACTIONS = (
    "Read",
    "Create",
    "Update",
    "Delete",
    "Search for",
    "List",
    "Export",
    "Validate",
    "Summarize",
    "Move",
    "Copy",
    "Archive",
    "Restore",
    "Tag",
    "Watch",
    "Count",
)


def queries(n: int, seed: int = 7) -> list[str]:
    """``n`` different discovery queries of 5 to 15 words."""
    pool = [
        " ".join(part for part in (verb, obj, qualifier) if part)
        for verb in _VERBS
        for obj in _OBJECTS
        for qualifier in _QUALIFIERS
    ]
    pool = [q for q in pool if 5 <= len(q.split()) <= 15]
    random.Random(seed).shuffle(pool)
    return pool[:n]


def descriptions(n: int) -> list[str]:
    """``n`` different tool descriptions of about 30 words."""
    out: list[str] = []
    for i in range(n):
        thing, where, detail = _SUBJECTS[i % len(_SUBJECTS)]
        action = _ACTIONS[(i // len(_SUBJECTS)) % len(_ACTIONS)]
        out.append(
            f"{action} a {thing} in {where}. Handles {detail} and reports a clear error "
            f"when the {thing} cannot be found or access is denied. Use it for variant {i}."
        )
    return out


def _time_queries(embedder: Embedder, texts: Sequence[str]) -> list[float]:
    embedder.embed(texts[:5])  # warm caches and the BLAS thread pool
    times: list[float] = []
    for text in texts:
        start = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - start) * 1000)
    return times


def rss_mb() -> float | None:
    """This process's resident memory in MB (``/proc``; ``None`` elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _percentile(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description="Embedder latency and throughput.")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--embedder", choices=("auto", "minilm", "hashing"), default="auto")
    parser.add_argument("--shared", action="store_true", help="through the shared process")
    args = parser.parse_args()
    choice = cast(Literal["auto", "minilm", "hashing"], args.embedder)

    rss_start = rss_mb()
    start = time.perf_counter()
    shared_in = Path(tempfile.mkdtemp(prefix="pml-bench-")) if args.shared else None
    embedder = load_embedder(choice, shared_in=shared_in)
    if isinstance(embedder, DeferredMiniLm):
        embedder.model()  # the runtime is built on first use: count it
    elif isinstance(embedder, SharedModel):
        embedder.embed(["start"])  # the process is started on first use: count it
    load_ms = (time.perf_counter() - start) * 1000
    rss_loaded = rss_mb()

    texts = queries(args.queries)
    times = _time_queries(embedder, texts)
    batch = descriptions(args.batch)
    embedder.embed(batch[:8])
    start = time.perf_counter()
    embedder.embed(batch)
    batch_s = time.perf_counter() - start
    rss_after_batch = rss_mb()
    hashing = _time_queries(HashingEmbedder(), texts)

    print(
        json.dumps(
            {
                "model_id": embedder.model_id,
                "shared": args.shared,
                "dim": embedder.dim,
                "load_ms": round(load_ms, 1),
                "queries": len(times),
                "query_p50_ms": round(statistics.median(times), 3),
                "query_p95_ms": round(_percentile(times, 95), 3),
                "query_p99_ms": round(_percentile(times, 99), 3),
                "batch_size": len(batch),
                "batch_texts_per_s": round(len(batch) / batch_s, 1),
                "rss_start_mb": rss_start,
                "rss_loaded_mb": rss_loaded,
                "rss_after_batch_mb": rss_after_batch,
                "hashing_query_p50_ms": round(statistics.median(hashing), 3),
                "hashing_query_p95_ms": round(_percentile(hashing, 95), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
