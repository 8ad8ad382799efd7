"""Stored routing follows ``[routing]`` when a gateway starts and when it reloads.

    await routing_at_start(db, settings)
    await routing_at_start(db, new_settings, trigger="reload")

The re-derivation (``routing_sync``) reads every capability of every tenant; a deployment
whose patterns did not change since the last run it completed has nothing to re-derive, so
the patterns' fingerprint is remembered (``deployment_state``) and a start with the same
patterns skips the scan. ``pml cap routing`` always scans.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Final

from pml.errors import PmlError
from pml.registry.models import RoutingRules
from pml.registry.routing_sync import Announce, RoutingChange, audit_routing_changes, sync_routing
from pml.storage.database import Database
from pml.storage.state_repo import recalled, remember

if TYPE_CHECKING:
    from pml.config import Settings

logger = logging.getLogger(__name__)

FINGERPRINT_KEY: Final = "routing_rules"
# Raised when the derivation itself changes, so that every deployment re-derives once.
DERIVATION_VERSION: Final = 1


def fingerprint(rules: RoutingRules) -> str:
    """A digest of the patterns (their order does not matter)."""
    data = {"v": DERIVATION_VERSION, "cloud": sorted(rules.cloud), "local": sorted(rules.local)}
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()


async def routing_at_start(
    db: Database, settings: Settings, *, announce: Announce | None = None, trigger: str = "start"
) -> list[RoutingChange]:
    """Make stored routing follow ``settings``' ``[routing]``: applied, announced, audited,
    logged; skipped when the patterns are those of the last completed run; a failure is
    logged, never raised, as the stored routing stays usable."""
    from pml.config import audit_file_path
    from pml.policy.audit import AuditLog
    from pml.registry.changes import ChangeAnnouncer
    from pml.wiring import routing_rules, scope_of

    rules = routing_rules(settings)
    user = scope_of(settings).user
    if announce is None:
        announce = ChangeAnnouncer(db).announce
    try:
        current = fingerprint(rules)
        if await recalled(db, FINGERPRINT_KEY) == current:
            logger.debug("routing follows [routing]: patterns unchanged, nothing re-derived")
            return []
        changes = await sync_routing(db, rules, announce=announce, user=user, trigger=trigger)
        await remember(db, FINGERPRINT_KEY, current)
    except PmlError as error:
        logger.warning("stored routing not re-derived from [routing]: %s", error)
        return []
    logger.info("routing follows [routing]: %d capabilities re-derived", len(changes))
    if changes:
        audit = AuditLog(db, audit_file_path(settings))
        async with audit.running():
            audit_routing_changes(audit, changes, rules, user=user, trigger=trigger)
    return changes
