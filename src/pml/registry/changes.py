"""Telling the rest of PML that capabilities changed in a scope (names, versions, visibility).

    registry.on_change(listener)           # async listener(CapabilityChange)
    change = CapabilityChange.from_payload(text)    # what another replica sent (None if bad)

The registry announces a committed write that can change what a scope's capability tools
look like: a named capability created, a name given, a rename, a new version, changed
metadata. Listeners in this process are called at once; on PostgreSQL the same change is
also sent with ``NOTIFY`` on ``CHANGES_CHANNEL`` so that every replica (and every gateway
behind a CLI that renamed something) hears of it. ``origin`` tells a process its own echo.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Final

from pml.errors import PmlError
from pml.storage.database import Database

logger = logging.getLogger(__name__)

CHANGES_CHANNEL: Final = "pml_capability_changes"
MAX_PAYLOAD: Final = 4000
# The kind of a new unnamed capability: it changes no tool list (watchers of tool lists
# skip it) but discovery indexes it and curation counts it.
UNNAMED_CAPTURE: Final = "captured_unnamed"  # PostgreSQL allows 8000 bytes per NOTIFY payload
# The kind of a change to a capability's remembered intents: discovery re-reads it, tool
# lists do not change.
INTENTS_CHANGED: Final = "intents_changed"


@dataclass(frozen=True, slots=True)
class CapabilityChange:
    """A capability of ``org.project`` changed (``fqdn``), announced by ``origin``."""

    org: str
    project: str
    fqdn: str
    kind: str
    origin: str

    def to_payload(self) -> str:
        """The JSON text sent with ``NOTIFY``."""
        return json.dumps(asdict(self), separators=(",", ":"))[:MAX_PAYLOAD]

    @classmethod
    def from_payload(cls, text: str) -> CapabilityChange | None:
        """The change a payload describes, or ``None`` when it is not one of ours."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        fields = ("org", "project", "fqdn", "kind", "origin")
        values = [data.get(name) for name in fields]  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if not all(isinstance(value, str) for value in values):  # pyright: ignore[reportUnknownVariableType]
            return None
        return cls(*(str(value) for value in values))  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]


ChangeListener = Callable[[CapabilityChange], Awaitable[None]]


def new_origin() -> str:
    """A fresh identity for one registry (one gateway, one CLI command)."""
    return uuid.uuid4().hex


class ChangeAnnouncer:
    """Tells listeners in this process, then other processes (PostgreSQL), of a change."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._listeners: list[ChangeListener] = []
        self.origin = new_origin()

    def subscribe(self, listener: ChangeListener) -> None:
        """Call ``listener`` after every announced change."""
        self._listeners.append(listener)

    async def announce(
        self, org: str, project: str, fqdn: str, kind: str, *, notified: bool = False
    ) -> None:
        """Announce a committed change; never raises (the write has happened whatever this
        does, so failures are logged only). ``notified``: the write's own statement already
        sent the ``NOTIFY`` (a capture's one-statement creation), so only listeners here."""
        await self.announce_all([(org, project, fqdn, kind)], notified=notified)

    async def announce_all(
        self, changes: Sequence[tuple[str, str, str, str]], *, notified: bool = False
    ) -> None:
        """``announce`` each (org, project, fqdn, kind) in order, with one ``NOTIFY``
        statement for all of them."""
        made = [CapabilityChange(*change, origin=self.origin) for change in changes]
        for change in made:
            for listener in list(self._listeners):
                try:
                    await listener(change)
                except Exception:  # a listener must not turn a committed write into an error
                    logger.exception("capability change listener failed (%s)", change.fqdn)
        if notified or not made:
            return
        try:
            await self._db.notify_all(CHANGES_CHANNEL, [change.to_payload() for change in made])
        except PmlError as error:
            logger.warning("capability change not announced to other processes: %s", error)
