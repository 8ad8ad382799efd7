"""Capability curation: names for unnamed capabilities (``cap_curate``, SPEC §6.5).

    from pml.curation import CurationService
    curation = CurationService(registry, db, settings=settings.curation, llm=client)
    answer = await curation.call(scope, {"mode": "suggest"})
    answer["suggestions"][0]   # {"id", "currentName", "suggestedName", "confidence", "reasoning"}

``heuristics`` guesses ``namespace:action`` and its scores, ``collisions`` keeps names unique,
``llm_names`` asks a model (optional), ``service`` runs and stores curations and ``auto``
starts suggest runs by itself after new unnamed captures.
"""

from pml.curation.service import CurationService, Suggestion

__all__ = ["CurationService", "Suggestion"]
