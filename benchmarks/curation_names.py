"""Free-name search of a curation suggest run when many capabilities want the same name.

    python benchmarks/curation_names.py [--owners 200] [--taken 5000] [--repeat 5]

A project already holds ``--taken`` names (one in ten a variant ``filesystem:read_text_file_k``
of the name every new capability wants, the rest unrelated); then ``--owners`` capabilities
ask for ``filesystem:read_text_file`` one after the other and reserve what they get — what
``cap_curate`` suggest does for a run of 200 (its limit) unnamed capabilities that all read
a file. Times the book's construction and the searches (best of ``--repeat``).

Prints one JSON line: {"owners", "taken", "build_ms", "search_ms", "per_owner_us", "max_suffix"}.
"""

from __future__ import annotations

import argparse
import json
import time

from pml.curation.collisions import MAX_SUFFIX, NameBook
from pml.registry.names import split_display_name, tool_name_for


def held_names(taken: int) -> tuple[dict[str, str], dict[str, str]]:
    names: dict[str, str] = {}
    tools: dict[str, str] = {}
    for n in range(taken):
        if n % 10 == 0 and n // 10 + 2 <= MAX_SUFFIX:
            name = f"filesystem:read_text_file_{n // 10 + 2}"
        else:
            name = f"code:unnamed_{n:08x}"
        names[name] = f"acme.web.held.{n}"
        tools[tool_name_for(*split_display_name(name, "code"))] = f"acme.web.held.{n}"
    return names, tools


def run(owners: int, taken: int) -> tuple[float, float, int]:
    names, tools = held_names(taken)
    started = time.perf_counter()
    book = NameBook(names, tools)
    built = time.perf_counter()
    highest = 0
    for n in range(owners):
        found = book.free_variant("filesystem", "read_text_file", f"acme.web.new.{n}")
        if found is not None:
            book.reserve(found[0], f"acme.web.new.{n}")
            highest = max(highest, found[1])
    done = time.perf_counter()
    return built - started, done - built, highest


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--owners", type=int, default=200)
    parser.add_argument("--taken", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    runs = [run(options.owners, options.taken) for _ in range(max(1, options.repeat))]
    build_s = min(r[0] for r in runs)
    search_s = min(r[1] for r in runs)
    print(
        json.dumps(
            {
                "owners": options.owners,
                "taken": options.taken,
                "build_ms": round(build_s * 1000, 2),
                "search_ms": round(search_s * 1000, 2),
                "per_owner_us": round(search_s * 1e6 / max(1, options.owners), 1),
                "max_suffix": runs[0][2],
            }
        )
    )


if __name__ == "__main__":
    main()
