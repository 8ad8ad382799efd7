"""``cap_curate``: suggest, apply automatically, or apply given names (SPEC §6.5).

    curation = CurationService(registry, db, settings=settings.curation, llm=client)
    await curation.call(scope, {"mode": "suggest"})          # the tool's JSON (raw arguments)
    await curation.curate(scope, CurateParams(mode="auto"))  # applies confidence > 0.8
    registry.on_change(curation.capability_changed)          # automatic suggest runs
    async with curation.running(): ...                       # (they run in the background)

A run looks at the capabilities of the caller's own org/project it may see (``filter``:
``unnamed_only`` by default, ``min_usage``), most used first, at most ``max_per_call``
(200) per call; the answer says how many matched (``matching``) and how many were looked at
(``considered``). Names come from the heuristics (``pml.curation.heuristics``) or, with an
LLM configured, from the model when its name is well formed and free. ``suggest`` changes
nothing; ``auto`` renames the unnamed capabilities whose suggestion scores strictly above
``auto_threshold``; ``apply`` makes the given renames, each on its own: a bad one is listed
in ``skipped`` with its error and the others go on. Renames go through the registry, so the
old name stays as an alias. Every run is stored in ``curation_runs``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pml.curation.auto import AutoRuns
from pml.curation.collisions import NameBook
from pml.curation.heuristics import NameGuess, confidence, guess_name, tools_match
from pml.curation.llm_names import LlmName, LlmNamer
from pml.errors import NotFound, PmlError
from pml.gateway.schemas import CurateFilter, CurateParams, CurateRename
from pml.llm import JsonCompleter
from pml.registry.changes import CapabilityChange
from pml.registry.fqdn import message_value
from pml.registry.models import CapabilityRecord, RenameChanges
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import parse_params
from pml.sections import CurationSettings
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.curation_repo import CurationRun, NewCurationRun, SqlCurationRepository
from pml.storage.database import Database
from pml.storage.types import utc_now

logger = logging.getLogger(__name__)

MAX_PER_CALL: Final = 200
MAX_REF: Final = 400
_SHOWN_INTENT: Final = 60
Trigger = Literal["manual", "auto"]


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A name suggested for one capability, with its score and why."""

    fqdn: str
    current_name: str
    suggested_name: str
    confidence: float
    reasoning: str
    named: bool

    def to_dict(self) -> dict[str, Any]:
        """The SPEC shape ``{id, currentName, suggestedName, confidence, reasoning}``."""
        return {
            "id": self.fqdn,
            "currentName": self.current_name,
            "suggestedName": self.suggested_name,
            "confidence": self.confidence,
            "reasoning": self.reasoning,
        }


class CurationService:
    """Names unnamed capabilities (see module); shared by the gateway and the CLI."""

    def __init__(
        self,
        registry: CapabilityRegistry,
        db: Database,
        *,
        settings: CurationSettings | None = None,
        llm: JsonCompleter | None = None,
        clock: Callable[[], datetime] = utc_now,
        max_per_call: int = MAX_PER_CALL,
    ) -> None:
        self._registry = registry
        self._db = db
        self.settings = settings or CurationSettings()
        self._llm = llm
        self._clock = clock
        self.max_per_call = max(1, max_per_call)
        self._auto = AutoRuns(
            db,
            self._auto_run,
            after=self.settings.auto_suggest_after,
            min_interval_s=self.settings.auto_suggest_interval_s,
        )

    # -- the tool ------------------------------------------------------------------------

    async def call(self, scope: Scope, arguments: object) -> dict[str, Any]:
        """``cap_curate`` with raw arguments (``INVALID_INPUT`` when they are malformed)."""
        return await self.curate(scope, parse_params(CurateParams, arguments))

    async def curate(
        self, scope: Scope, params: CurateParams, *, trigger: Trigger = "manual"
    ) -> dict[str, Any]:
        """Run one curation and store it: ``{mode, suggestions, applied, skipped, ...}``."""
        started = self._clock()
        applied: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        suggestions: list[Suggestion] = []
        considered = matching = 0
        if params.mode == "apply":
            renames = params.renames or []
            applied, skipped = await self._apply(scope, renames)
            considered = matching = len(renames)
        else:
            chosen = params.filter or CurateFilter()
            async with self._db.read() as conn:
                repo = SqlCurationRepository(conn)
                records, matching = await repo.candidates(
                    scope,
                    unnamed_only=chosen.unnamed_only,
                    min_usage=chosen.min_usage,
                    limit=self.max_per_call,
                )
                names, tool_names = await repo.names_in_use(scope.org, scope.project)
            considered = len(records)
            suggestions = await self.suggest(records, NameBook(names, tool_names))
            if params.mode == "auto":
                applied, skipped = await self._auto_apply(scope, suggestions)
        shown = [suggestion.to_dict() for suggestion in suggestions]
        run = NewCurationRun(
            scope.org, scope.project, trigger, params.mode, shown, applied, started
        )
        async with self._db.transaction() as conn:
            run_id = await SqlCurationRepository(conn).insert_run(run)
        return {
            "mode": params.mode,
            "suggestions": shown,
            "applied": applied,
            "skipped": skipped,
            "considered": considered,
            "matching": matching,
            "limit": self.max_per_call,
            "trigger": trigger,
            "runId": run_id,
        }

    async def suggest(
        self, records: Sequence[CapabilityRecord], book: NameBook
    ) -> list[Suggestion]:
        """A free name for each capability, in order (each one reserved for the next)."""
        guesses = {record.fqdn: guess_name(record.intent, record.tools_used) for record in records}
        proposals: dict[str, LlmName] = {}
        if self._llm is not None and records:
            namer = LlmNamer(self._llm, batch_size=self.settings.batch_size)
            namespaces = {fqdn: guess.namespace for fqdn, guess in guesses.items()}
            proposals = await namer.names_for(records, namespaces)
        suggestions: list[Suggestion] = []
        for record in records:
            guess = guesses[record.fqdn]
            proposal = proposals.get(record.fqdn)
            suggestion: Suggestion | None = None
            if proposal is not None and book.is_free(proposal.name, record.fqdn):
                suggestion = _from_llm(record, guess, proposal)
            elif proposal is not None:
                logger.warning(
                    "LLM name %r for %s is in use: heuristic name used", proposal.name, record.fqdn
                )
            if suggestion is None:
                suggestion = _from_heuristics(record, guess, book)
            book.reserve(suggestion.suggested_name, record.fqdn)
            suggestions.append(suggestion)
        return suggestions

    async def latest_run(self, scope: Scope) -> CurationRun | None:
        """The newest stored run of the scope's org/project."""
        async with self._db.read() as conn:
            return await SqlCurationRepository(conn).latest_run(scope.org, scope.project)

    # -- automatic runs ------------------------------------------------------------------

    async def capability_changed(self, change: CapabilityChange) -> None:
        """Registry listener: schedules an automatic suggest run (see ``pml.curation.auto``)."""
        await self._auto.capability_changed(change)

    def running(self) -> AbstractAsyncContextManager[None]:
        """Hosts the automatic runs in the background while the block runs."""
        return self._auto.running()

    async def settled(self) -> None:
        """Return when no automatic check or run is pending (tests, shutdown)."""
        await self._auto.settled()

    async def _auto_run(self, scope: Scope) -> None:
        result = await self.curate(scope, CurateParams(mode="suggest"), trigger="auto")
        logger.info(
            "automatic curation of %s: %d suggestions", scope.key, len(result["suggestions"])
        )

    # -- writes --------------------------------------------------------------------------

    async def _auto_apply(
        self, scope: Scope, suggestions: Sequence[Suggestion]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        threshold = self.settings.auto_threshold
        applied: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for suggestion in suggestions:
            reason: str | None = None
            if suggestion.named:
                reason = "already named: auto mode renames only unnamed capabilities"
            elif suggestion.confidence <= threshold:
                reason = f"confidence {suggestion.confidence:g} is not above {threshold:g}"
            if reason is not None:
                skipped.append(
                    {"id": suggestion.fqdn, "name": suggestion.suggested_name, "reason": reason}
                )
                continue
            outcome = await self._rename(
                scope, suggestion.fqdn, suggestion.fqdn, suggestion.suggested_name
            )
            (applied if "newName" in outcome else skipped).append(outcome)
        return applied, skipped

    async def _apply(
        self, scope: Scope, renames: Sequence[CurateRename]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        applied: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for rename in renames:
            try:
                fqdn = await self._own_fqdn(scope, rename.id)
            except PmlError as error:
                skipped.append(_skip(rename.id, rename.name, error))
                continue
            outcome = await self._rename(scope, rename.id, fqdn, rename.name)
            (applied if "newName" in outcome else skipped).append(outcome)
        return applied, skipped

    async def _rename(self, scope: Scope, shown_id: str, fqdn: str, name: str) -> dict[str, Any]:
        """One rename: the ``applied`` entry, or the ``skipped`` one with its error."""
        try:
            async with self._db.read() as conn:
                before = await SqlCapabilityRepository(conn).get(fqdn)
            if before is None:
                raise NotFound(f"Capability not found: {message_value(shown_id)}")
            after = await self._registry.rename(scope, fqdn, RenameChanges(new_name=name))
        except PmlError as error:
            return _skip(shown_id, name, error)
        return {
            "id": shown_id,
            "fqdn": fqdn,
            "oldName": before.display_name,
            "newName": after.display_name,
        }

    async def _own_fqdn(self, scope: Scope, ref: str) -> str:
        """The FQDN an id designates in the caller's own org/project (FQDN, display name,
        alias, tool name or record id); anything else is ``NOT_FOUND``, as if missing."""
        async with self._db.read() as conn:
            found = (
                await SqlCapabilityRepository(conn).resolve_name(scope, ref)
                if len(ref) <= MAX_REF
                else None
            )
            if found is not None and (found[0].org, found[0].project) == (
                scope.org,
                scope.project,
            ):
                return found[0].fqdn
            by_id = await SqlCurationRepository(conn).fqdn_of_id(scope.org, scope.project, ref)
        if by_id is None:
            raise NotFound(f"Capability not found: {message_value(ref)}")
        return by_id


def _skip(shown_id: str, name: str, error: PmlError) -> dict[str, Any]:
    return {
        "id": message_value(shown_id),
        "name": message_value(name),
        "reason": error.message,
        "error": error.to_dict(),
    }


def _from_llm(record: CapabilityRecord, guess: NameGuess, proposal: LlmName) -> Suggestion:
    namespace = proposal.name.partition(":")[0].lower()
    score = confidence(
        tools_match=tools_match(namespace, record.tools_used),
        intent_clarity=guess.intent_clarity,
        uniqueness=1.0,
    )
    why = proposal.reasoning or "it fits the intent, tools and code"
    return Suggestion(
        record.fqdn,
        record.display_name,
        proposal.name,
        score,
        f"Named by the LLM: {why}",
        record.named,
    )


def _from_heuristics(record: CapabilityRecord, guess: NameGuess, book: NameBook) -> Suggestion:
    found = book.free_variant(guess.namespace, guess.action, record.fqdn)
    if found is None:  # a thousand variants taken: keep the hash to stay unique
        name, k = f"{guess.name[:55]}_{record.hash[:8]}", 0
    else:
        name, k = found
    if k == 1:
        collision = ""
    elif k:
        collision = f"; '{guess.name}' is taken, hence the suffix _{k}"
    else:
        collision = f"; '{guess.name}' and its variants are taken, hence the hash suffix"
    uniqueness = 1.0 / k if k else 0.0
    score = confidence(
        tools_match=guess.tools_match, intent_clarity=guess.intent_clarity, uniqueness=uniqueness
    )
    return Suggestion(
        record.fqdn,
        record.display_name,
        name,
        score,
        _reasoning(record, guess) + collision + ".",
        record.named,
    )


def _reasoning(record: CapabilityRecord, guess: NameGuess) -> str:
    tools = record.tools_used
    if tools:
        share = round(guess.tools_match * len(tools))
        where = f"from the tools used ({share} of {len(tools)} on that server)"
    else:
        where = "because the code calls no tools"
    if guess.from_intent:
        intent = " ".join((record.intent or "").split())
        intent = "".join(char for char in intent if char.isprintable())
        if len(intent) > _SHOWN_INTENT:
            intent = intent[: _SHOWN_INTENT - 1] + "…"
        how = f'from the intent "{intent}"'
    elif tools:
        how = "from the tool names (the intent names no action)"
    else:
        how = "as a placeholder (no usable intent and no tools)"
    return f"Namespace '{guess.namespace}' {where}, action '{guess.action}' {how}"
