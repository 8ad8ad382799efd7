"""What analysing one snippet costs, for ordinary and hostile shapes near the size limit.

    python benchmarks/analysis_cost.py [--kb 100] [--repeat 3]

Each shape is a snippet of about ``--kb`` KB (``[sandbox] max_code_bytes`` is 100 KB by
default) made of one construct repeated: long lists of numbers or strings, f-strings, names,
tool calls, comments, long strings, prose. ``analyze_snippet`` runs on each (the parse, the
``mcp`` rules, literal lifting and every secret check, as ``pml_execute`` does before a run)
and the best of ``--repeat`` times is printed, in milliseconds, with the snippet's size.
A snippet over ``pml.sandbox.study.INLINE_BYTES`` is analysed by the gateway's checking
process (one at a time, stopped past 10 s of CPU), so these figures are CPU spent there,
not time the gateway is held.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from pml.analysis.snippet import analyze_snippet
from pml.errors import PmlError
from pml.sandbox.study import INLINE_BYTES

SHAPES: dict[str, Callable[[int], str]] = {
    "numbers": lambda n: "x = [" + ",".join(str(i) for i in range(n // 6)) + "]",
    "strings": lambda n: "x = [" + ",".join(f'"s{i}abc"' for i in range(n // 10)) + "]",
    "argv": lambda n: "x = [" + ",".join(f'"-x{i}"' for i in range(n // 9)) + "]",
    "fstrings": lambda n: "\n".join(f'a{i} = f"v{{x}} {i} {{y}}"' for i in range(n // 25)),
    "names": lambda n: "\n".join(f"abcdefghijklmnop{i} = {i}" for i in range(n // 25)),
    "calls": lambda n: "\n".join(
        f'r{i} = await mcp.fs.read_file(path="/tmp/{i}")' for i in range(n // 48)
    ),
    "comments": lambda n: "\n".join(
        f"# note {i}: the password is hunter{i}" for i in range(n // 36)
    ),
    # every element may become the credential: each is lifted
    "credential_loop": lambda n: (
        "vals = ["
        + ",".join(f'"s{i}abc"' for i in range(n // 10))
        + "]\nfor v in vals:\n    login(password=v)"
    ),
    # a credential read through a chain of elements of elements
    "element_chain": lambda n: (
        "a0 = [[0]]\n"
        + "\n".join(f"a{i + 1} = [a{i}[0]]" for i in range(n // 22))
        + f"\nlogin(password=a{n // 22}[0][0])"
    ),
    # credentials given by position to the snippet's own function: each call's is lifted
    "positional_calls": lambda n: (
        "def f(a, password):\n    return a\n"
        + "\n".join(f'f("x{i}", "v{i}abc")' for i in range(n // 20))
    ),
    # spreads of unknown length into a function of many credential parameters
    "spread_calls": lambda n: (
        "def g("
        + ", ".join(f"token{i}" for i in range(n // 20))
        + "):\n    return 1\n"
        + "\n".join(f"g(*r{i})" for i in range(n // 16))
    ),
    "long_string": lambda n: 'x = "' + "ab1 " * (n // 4 - 4) + '"',
    "prose": lambda n: 'x = """' + "the api key is in the vault, " * (n // 30) + '"""',
}


def measure(code: str, repeat: int) -> tuple[float, str]:
    best, outcome = float("inf"), "ok"
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            analyze_snippet(code, max_code_bytes=len(code.encode()) + 1)
        except PmlError as error:
            outcome = error.code
        best = min(best, time.perf_counter() - started)
    return best * 1000, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description="Analysis cost per snippet shape.")
    parser.add_argument("--kb", type=int, default=100, help="size of each snippet, in KB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per shape (best kept)")
    args = parser.parse_args()
    if args.kb < 1 or args.repeat < 1:
        parser.error("--kb and --repeat must be >= 1")
    shapes: dict[str, dict[str, object]] = {}
    for name, make in SHAPES.items():
        code = make(args.kb * 1000) + "\nreturn 1"
        ms, outcome = measure(code, args.repeat)
        shapes[name] = {"bytes": len(code.encode()), "ms": round(ms, 1), "outcome": outcome}
    print(json.dumps({"inline_analysis_bytes": INLINE_BYTES, "shapes": shapes}))


if __name__ == "__main__":
    main()
