"""Suggestion mode of ``pml_execute``: what to call for an intent, with code to start from.

    found = await suggestions("read a json file", scope=scope, discovery=discovery)
    found[0]["callName"], found[0]["template"]

The ranking is discovery's (``pml_discover``); results too weak to be worth trying are left
out, so an intent nothing fits gets no suggestions. Each suggestion carries a ready
``callName`` and a code template; nothing runs.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

from pml.discovery.base import Discoverer
from pml.registry.scope import Scope

MAX_SUGGESTIONS: Final = 5
# Below this discovery score a result shares neither meaning nor words with the intent.
MIN_SUGGESTION_SCORE: Final = 0.3


def template(call: str, schema: dict[str, Any]) -> str:
    """A snippet calling ``call`` with its required parameters taken from ``args``."""
    required = schema.get("required")
    names = (
        [n for n in cast("list[Any]", required) if isinstance(n, str)]
        if isinstance(required, list)
        else []
    )
    kwargs = ", ".join(f"{n}=args[{json.dumps(n)}]" for n in names if n.isidentifier())
    return f"result = await {call}({kwargs})\nreturn result"


async def suggestions(intent: str, *, scope: Scope, discovery: Discoverer) -> list[dict[str, Any]]:
    """The best tools and capabilities for ``intent``, best first, each with a template."""
    found = await discovery.discover(
        scope, intent, limit=MAX_SUGGESTIONS, min_score=MIN_SUGGESTION_SCORE
    )
    for entry in found:
        entry["template"] = template(entry["callName"], entry["inputSchema"])
    return found
