"""Stored routing follows ``[routing]`` (SPEC §8, §14): re-derive it after a config change.

    changes = await sync_routing(db, RoutingRules(cloud=("search*",)), apply=False)  # a check
    changes = await sync_routing(db, rules, announce=announcer.announce, auditor=audit)
    await routing_at_start(db, settings)          # the gateway's start (routing_start.py)

A capability's routing is computed when it is created and on every new version; when the
patterns change, the stored value of every capability of every tenant with no explicit
override (and not archived) is derived again from its ``tools_used``, exactly as
``resolve_routing`` does at creation, and stored in place when it differs: routing is
metadata, so no version is written.

A capability used by another contributes its own routing. Dependencies are solved as a
whole, so the result does not depend on the order rows are read: a capability is ``local``
when a local tool, an unknown capability or a fixed-``local`` one (an override, an archived
or MCP server record) is reachable through the capabilities it uses, else ``cloud``. A
cycle of capabilities that reaches nothing local is therefore ``cloud``, and the solve
(one pass over the dependency edges) always ends.

Capabilities are read ``batch_size`` at a time (code and schemas are never read); only
those that use other capabilities stay in memory, as their FQDN and dependencies, until the
solve. Each batch is committed before its changes are announced (``kind`` =
``ROUTING_CHANGED``) and one ``CAPABILITY_ROUTING_CHANGED`` audit event per org/project
sums up a run that changed something.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from pml.errors import InvalidInput
from pml.policy.model import Auditor
from pml.registry.fqdn import is_fqdn
from pml.registry.models import RoutingRules
from pml.registry.names import capability_tool_parts
from pml.registry.routing import Routing, resolve_routing
from pml.registry.scope import Scope
from pml.storage.capability_repo import resolve_reference
from pml.storage.database import Database
from pml.storage.routing_repo import (
    RoutingRow,
    routing_page,
    routing_rows,
    routing_states,
    set_routing,
    visible_fqdns,
)
from pml.storage.types import utc_now

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

ROUTING_CHANGED: Final = "routing_changed"  # the change kind listeners receive
AUDIT_EVENT: Final = "CAPABILITY_ROUTING_CHANGED"
BATCH: Final = 500
# A project's tool lists are re-read once per announcement by every replica's watcher;
# past this many in one run, the rest are found by their moved ``updated_at`` instead.
ANNOUNCED_PER_SCOPE: Final = 100
AUDITED_PER_SCOPE: Final = 50
MEMO_SIZE: Final = 10_000  # tool references whose own routing a run remembers

Announce = Callable[[str, str, str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RoutingChange:
    """One capability whose stored routing differs from what ``[routing]`` derives."""

    org: str
    project: str
    fqdn: str
    display_name: str
    stored: str
    derived: Routing

    def to_dict(self) -> dict[str, str]:
        """The change as JSON (``pml cap routing --json``)."""
        return {
            "name": self.display_name,
            "fqdn": self.fqdn,
            "org": self.org,
            "project": self.project,
            "from": self.stored,
            "to": self.derived,
        }


@dataclass(frozen=True, slots=True)
class _Pending:
    """A capability that is ``cloud`` unless a capability it uses turns out ``local``."""

    row: RoutingRow
    deps: frozenset[str]


def _scope_of(row: RoutingRow) -> Scope | None:
    try:
        return Scope(row.org, row.project, row.created_by)
    except InvalidInput:  # a damaged row: its capability references resolve to nothing
        return None


_RefKey = tuple[str, str, str, str]  # the creator's org, project, user; the reference


class _Run:
    """One re-derivation over the whole database (see module)."""

    def __init__(
        self,
        db: Database,
        rules: RoutingRules,
        *,
        apply: bool,
        announce: Announce | None,
        clock: Callable[[], datetime],
    ) -> None:
        self._db = db
        self._rules = rules
        self._apply = apply
        self._announce = announce
        self._clock = clock
        self._announced: Counter[tuple[str, str]] = Counter()
        self._own: dict[str, Routing | None] = {}
        self.changes: list[RoutingChange] = []
        self.pending: dict[str, _Pending] = {}
        self.values: dict[str, Routing] = {}  # settled routing of capabilities others use

    async def scan(self, batch_size: int) -> None:
        """Derive every capability, a batch at a time; store the settled ones at once."""
        after: str | None = None
        while True:
            async with self._db.read() as conn:
                rows = await routing_page(conn, after=after, limit=batch_size)
            derived = await self._derive(rows)
            await self._commit(self._settle(derived))
            if len(rows) < batch_size:
                return
            after = rows[-1].fqdn

    async def fill(self, batch_size: int) -> None:
        """Settle every capability a pending one uses (read again: the scan kept no values)."""
        seen = set(self.pending)
        missing = {dep for node in self.pending.values() for dep in node.deps} - seen
        while missing:
            seen |= missing
            wanted = sorted(missing)
            missing = set[str]()
            for start in range(0, len(wanted), batch_size):
                chunk = wanted[start : start + batch_size]
                async with self._db.read() as conn:
                    rows = await routing_rows(conn, chunk)
                    absent = sorted(set(chunk) - {row.fqdn for row in rows})
                    states = await routing_states(conn, absent)
                for fqdn in absent:  # no longer derivable (or gone) since it was resolved
                    state = states.get(fqdn)
                    self.values[fqdn] = "cloud" if state and state.routing == "cloud" else "local"
                for row, value in await self._derive(rows):
                    if isinstance(value, frozenset):
                        self.pending[row.fqdn] = _Pending(row, value)
                        missing |= value - seen
                    else:
                        self.values[row.fqdn] = value

    async def solve(self, batch_size: int) -> None:
        """Decide the pending capabilities together, then store those that changed."""
        local: set[str] = set()
        dependants: defaultdict[str, list[str]] = defaultdict(list)
        reached: list[str] = []
        for fqdn, node in self.pending.items():
            for dep in node.deps:
                if dep in self.pending:
                    dependants[dep].append(fqdn)
                elif self.values.get(dep, "local") == "local" and fqdn not in local:
                    local.add(fqdn)
                    reached.append(fqdn)
        while reached:  # local spreads to whatever uses it; each node is reached once
            for user in dependants.get(reached.pop(), ()):
                if user not in local:
                    local.add(user)
                    reached.append(user)
        changes = [
            _change(node.row, "local" if fqdn in local else "cloud")
            for fqdn, node in sorted(self.pending.items())
        ]
        changed = [change for change in changes if change is not None]
        for start in range(0, len(changed), batch_size):
            await self._commit(changed[start : start + batch_size])

    def _settle(
        self, derived: Sequence[tuple[RoutingRow, Routing | frozenset[str]]]
    ) -> list[RoutingChange]:
        changes: list[RoutingChange] = []
        for row, value in derived:
            if isinstance(value, frozenset):
                self.pending[row.fqdn] = _Pending(row, value)
            elif (change := _change(row, value)) is not None:
                changes.append(change)
        return changes

    async def _derive(
        self, rows: Sequence[RoutingRow]
    ) -> list[tuple[RoutingRow, Routing | frozenset[str]]]:
        """Each row's routing, or the derivable capabilities it waits for."""
        targets = await self._resolve(rows)
        async with self._db.read() as conn:
            states = await routing_states(
                conn, sorted({fqdn for fqdn in targets.values() if fqdn is not None})
            )
        derived: list[tuple[RoutingRow, Routing | frozenset[str]]] = []
        for row in rows:
            routing: Routing = "cloud"  # resolve_routing: no tools → cloud, any local → local
            deps: set[str] = set()
            for ref in row.tools_used if row.tools_used is not None else (None,):
                own = self._own_routing(ref)
                if own is not None:
                    routing = "local" if own == "local" else routing
                    continue
                target = targets.get((row.org, row.project, row.created_by, str(ref)))
                state = states.get(target) if target is not None else None
                if target is None or state is None:
                    routing = "local"  # an unknown capability counts as local
                elif state.derivable:
                    deps.add(target)  # cloud unless the solve finds it local
                elif state.routing != "cloud":
                    routing = "local"
            settled = routing == "local" or not deps
            derived.append((row, routing if settled else frozenset(deps)))
        return derived

    def _own_routing(self, ref: object) -> Routing | None:
        """What ``resolve_routing`` says of a tool reference alone; ``None`` for a
        capability reference (its routing is the capability's). Memoised per run."""
        if not isinstance(ref, str):
            return "local"  # a damaged row: the secure default
        if ref in self._own:
            return self._own[ref]
        # As resolve_routing tells them apart; the cheap tests first (most refs are tools).
        capability = (ref.count(".") == 4 and is_fqdn(ref)) or (
            ref.startswith("mcp__") and capability_tool_parts(ref) is not None
        )
        own: Routing | None = None
        if not capability:
            own = resolve_routing(
                [ref], cloud_patterns=self._rules.cloud, local_patterns=self._rules.local
            )
        if len(self._own) >= MEMO_SIZE:
            self._own.clear()
        self._own[ref] = own
        return own

    async def _resolve(self, rows: Sequence[RoutingRow]) -> dict[_RefKey, str | None]:
        """The FQDN each capability reference of ``rows`` designates, or ``None``.

        A reference means what it meant at creation: it is resolved in its creator's scope.
        FQDN references are read together per scope (an FQDN is never a display name, alias
        or tool name, so it designates the active record it names if the scope sees it);
        tool names go through the registry's own name resolution."""
        by_fqdn: defaultdict[Scope, set[str]] = defaultdict(set)
        targets: dict[_RefKey, str | None] = {}
        for row in rows:
            for ref in row.tools_used or ():
                if not isinstance(ref, str) or self._own_routing(ref) is not None:
                    continue
                key = (row.org, row.project, row.created_by, ref)
                scope = _scope_of(row)
                if key in targets or scope is None:
                    targets.setdefault(key, None)
                elif is_fqdn(ref):
                    targets[key] = None
                    by_fqdn[scope].add(ref)
                else:
                    found = await resolve_reference(self._db, scope, ref)
                    targets[key] = found[0].fqdn if found is not None else None
        if by_fqdn:
            async with self._db.read() as conn:
                for scope, fqdns in by_fqdn.items():
                    for fqdn in await visible_fqdns(conn, scope, sorted(fqdns)):
                        targets[(scope.org, scope.project, scope.user, fqdn)] = fqdn
        return targets

    async def _commit(self, changes: Sequence[RoutingChange]) -> None:
        if not self._apply or not changes:
            self.changes.extend(changes)
            return
        now = self._clock()
        done: set[str] = set()
        async with self._db.transaction() as conn:
            for routing in ("local", "cloud"):
                fqdns = [c.fqdn for c in changes if c.derived == routing]
                if fqdns:
                    done.update(await set_routing(conn, fqdns, routing, now))
        applied = [change for change in changes if change.fqdn in done]
        self.changes.extend(applied)
        for change in applied:  # committed: now others may hear of it
            key = (change.org, change.project)
            self._announced[key] += 1
            if self._announce is not None and self._announced[key] <= ANNOUNCED_PER_SCOPE:
                await self._announce(change.org, change.project, change.fqdn, ROUTING_CHANGED)


def _change(row: RoutingRow, derived: Routing) -> RoutingChange | None:
    if row.routing == derived:
        return None
    return RoutingChange(row.org, row.project, row.fqdn, row.display_name, row.routing, derived)


async def sync_routing(
    db: Database,
    rules: RoutingRules,
    *,
    apply: bool = True,
    announce: Announce | None = None,
    auditor: Auditor | None = None,
    user: str = "pml",
    trigger: str = "cli",
    batch_size: int = BATCH,
    clock: Callable[[], datetime] = utc_now,
) -> list[RoutingChange]:
    """Re-derive the stored routing of every capability under ``rules``; store the
    differences unless ``apply`` is false, and return them (what would change, in a check)."""
    if batch_size < 1:
        raise InvalidInput("batch_size must be at least 1", field="batch_size")
    run = _Run(db, rules, apply=apply, announce=announce, clock=clock)
    await run.scan(batch_size)
    await run.fill(batch_size)
    await run.solve(batch_size)
    if apply and auditor is not None:
        audit_routing_changes(auditor, run.changes, rules, user=user, trigger=trigger)
    return run.changes


def audit_routing_changes(
    auditor: Auditor,
    changes: Sequence[RoutingChange],
    rules: RoutingRules,
    *,
    user: str,
    trigger: str,
) -> None:
    """One event per org/project a run changed (another tenant never reads of it)."""
    by_scope: defaultdict[tuple[str, str], list[RoutingChange]] = defaultdict(list)
    for change in changes:
        by_scope[(change.org, change.project)].append(change)
    for (org, project), items in sorted(by_scope.items()):
        details: dict[str, object] = {
            "changed": len(items),
            "trigger": trigger,
            "cloud": list(rules.cloud),
            "local": list(rules.local),
            "capabilities": [
                {"capability": c.fqdn, "from": c.stored, "to": c.derived}
                for c in items[:AUDITED_PER_SCOPE]
            ],
        }
        if len(items) == 1:  # the dashboard's capability filter finds it
            details["capability"] = items[0].fqdn
        try:
            scope = Scope(org, project, user)
        except InvalidInput:
            logger.warning("routing change of %s.%s not audited: bad scope", org, project)
            continue
        auditor.emit(AUDIT_EVENT, scope=scope, details=details, decided_by="config:routing")
