"""Whether a call's client may be asked something mid-call (sampling, elicitation, roots).

An upstream server may send the client a request while one of its tools runs, and a
``pml_execute`` run or a capability tool may pause for a person's approval. The gateway
relays those through the SDK server's path (``relay_*``, ``approval_edge``), so the fast
lanes (stdio, HTTP) leave a call whose client declared one of these capabilities to it.

    may_ask({"elicitation": {}})  # True
    may_ask({"experimental": {}}) # False
"""

from __future__ import annotations

from typing import Any, Final, cast

import mcp_types

ASKING_CAPABILITIES: Final = ("elicitation", "sampling", "roots")


def may_ask(capabilities: object) -> bool:
    """Whether client ``capabilities`` (a dict, or the SDK's model) let a call ask the
    client something (see ``ASKING_CAPABILITIES``)."""
    if isinstance(capabilities, mcp_types.ClientCapabilities):
        return any(getattr(capabilities, key) is not None for key in ASKING_CAPABILITIES)
    if not isinstance(capabilities, dict):
        return False
    declared = cast(dict[str, Any], capabilities)
    return any(key in declared for key in ASKING_CAPABILITIES)


def envelope_may_ask(meta: object) -> bool:
    """Whether a 2026-07-28 request's ``_meta`` envelope declares an asking capability."""
    if not isinstance(meta, dict):
        return False
    return may_ask(cast(dict[str, Any], meta).get(mcp_types.CLIENT_CAPABILITIES_META_KEY))
