"""The policy version: a short fingerprint of the ``[policy]`` rules that grants are bound to.

    policy_version(settings)   # "3f2a9c01ab12"

Grants record the version they were issued under and stop covering calls when it changes
(SPEC §10.4). Settings that do not change what is permitted (``mode``, ``debug_routing``,
``llm_min_confidence``) are left out, so toggling them keeps existing grants valid.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pml.config import Settings

VERSION_CHARS = 12
IGNORED = frozenset({"mode", "debug_routing", "llm_min_confidence"})


def _builtin_rules() -> dict[str, Any]:
    """PML's own defaults (policy table, capability map): an upgrade that changes them is a
    new policy version too."""
    from pml.policy.capability_map import CapabilityMap
    from pml.policy.gate import DEFAULT_INTENT_POLICIES

    table = {name: row.model_dump(mode="json") for name, row in DEFAULT_INTENT_POLICIES.items()}
    return {"table": table, "capability_map": CapabilityMap().fingerprint()}


def policy_version(settings: Settings) -> str:
    """First 12 hex characters of SHA-256 over the canonical JSON of the policy rules and
    the built-in defaults."""
    rules = settings.policy.model_dump(mode="json", exclude=set(IGNORED))
    rules["builtin"] = _builtin_rules()
    canonical = json.dumps(rules, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:VERSION_CHARS]
