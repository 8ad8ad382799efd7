"""The one line of a failed server's stderr worth showing a person.

A server that fails to start usually says why on stderr, surrounded by noise: a Node.js
crash prints the source line, a caret, the error, a dozen ``at ...`` frames and the Node
version; a Python one prints a traceback whose last line is the error. The tail of stderr
is then a stack frame, not the reason. ``meaningful_line`` picks the reason:

    >>> meaningful_line([
    ...     "node:internal/modules/cjs/loader:1228", "  throw err;", "  ^", "",
    ...     "Error: Cannot find module '/srv/missing.js'",
    ...     "    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)",
    ...     "Node.js v20.19.2",
    ... ])
    "Error: Cannot find module '/srv/missing.js'"
    >>> meaningful_line(["Traceback (most recent call last):", '  File "x.py", line 1',
    ...                  "ModuleNotFoundError: No module named 'nope'"])
    "ModuleNotFoundError: No module named 'nope'"
    >>> meaningful_line(["listening...", "config file /etc/x.json not found"])
    'config file /etc/x.json not found'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

MAX_LINE_CHARS: Final = 300

# An error statement at the start of a line: "TypeError: ...", "Error [ERR_X]: ...",
# "error: ...", "FATAL ...", "panic: ...".
_ERROR_LINE: Final = re.compile(
    r"^(?:[A-Za-z_$][\w.$]*(?:Error|Exception|Exit)\b|(?:error|fatal|panic|critical)\b)",
    re.IGNORECASE,
)
# Lines that are never the reason: stack frames, carets, the runtime's banner.
_NOISE: Final = re.compile(
    r"^(?:\s+at\s|\s+File \"|\s*\^+\s*$|\s*throw\s|Node\.js v\d|node:internal/|"
    r"Traceback \(most recent call last\)|During handling of the above exception|"
    r"The above exception was the direct cause|\s*\.\.\.|\s*\{?\s*$|\s*}\s*$)"
)


def meaningful_line(lines: Sequence[str]) -> str:
    """The error statement among ``lines`` (see the module), else the last line that is not
    noise, else ``""``; at most ``MAX_LINE_CHARS`` characters."""
    errors = [line.strip() for line in lines if _ERROR_LINE.match(line)]
    if errors:
        python_traceback = any(line.startswith("Traceback (most recent") for line in lines)
        chosen = errors[-1] if python_traceback else errors[0]
    else:
        rest = [line.strip() for line in lines if line.strip() and not _NOISE.match(line)]
        chosen = rest[-1] if rest else ""
    return chosen[:MAX_LINE_CHARS]
