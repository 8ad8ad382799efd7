"""Embedding the texts the index lacks, in batches, without redoing another replica's work.

    filler = Filler(embed=..., stored=..., save=..., dim=384, batch=64, claim=...)
    await filler.fill([Wanted(key="tool:fs:read", digest=text_hash(text), text=text)], place)

Processes of one database that start together (replicas, or the local gateways sharing a
SQLite file) all find the same texts unstored, and each would embed every one of them (the
store's upsert keeps the last). When there is more than one batch, the batches are cut from
the texts sorted by key (the same batches in every process) and each process takes them in
an order of its own (random). For each batch it:

- takes the batch's claim (``claim``, held until the batch's vectors are stored;
  ``pml.storage.embed_claims``). A batch another process holds is left for the end;
- reads back which of the batch's keys another process stored meanwhile (same text hash,
  same model): those are used as stored, not embedded;
- embeds the rest and stores them.

Then, for each batch left for the end, it waits for the holder's claim and reads the batch
back (embedding only what the holder did not store, if it died). Two processes started
together embed each text once between them; a process alone embeds everything as before
and pays a claim and a read of at most ``batch`` keys per batch (~2 ms, against ~0.3 s to
embed a batch). A single batch (the usual new capability) is embedded with neither.

A failed read counts as nothing stored; a failed save is logged by ``save`` (the vectors are
in the index all the same). ``decoded`` is how a stored vector is taken: the right text hash
and the model's dimension, or not at all.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import numpy as np

from pml.discovery.index import Vector
from pml.errors import PmlError

logger = logging.getLogger(__name__)

Stored = Mapping[str, tuple[str, bytes]]  # key -> (text hash, float32 little-endian bytes)
# keys, wait -> whether this process embeds them now (``pml.storage.embed_claims``)
Claim = Callable[[list[str], bool], AbstractAsyncContextManager[bool]]
Place = Callable[["Wanted", Vector], None]  # a text's vector, as soon as it is had


@dataclass(frozen=True, slots=True)
class Wanted:
    """A text to have a vector for, stored under ``key`` with its text hash ``digest``."""

    key: str
    digest: str
    text: str


def decoded(saved: tuple[str, bytes] | None, digest: str, dim: int) -> Vector | None:
    """A stored vector, when it was made from the text of hash ``digest`` and has ``dim``
    values; else None (the text must be embedded)."""
    if saved is None or saved[0] != digest or len(saved[1]) != dim * 4:
        return None
    return np.frombuffer(saved[1], dtype="<f4").astype(np.float32)


@dataclass(frozen=True, slots=True)
class Filler:
    """How texts are embedded, read back, stored and claimed (see module)."""

    embed: Callable[[list[str]], Awaitable[Vector]]
    stored: Callable[[list[str]], Awaitable[Stored]]
    save: Callable[[list[tuple[str, str]], Vector], Awaitable[None]]
    dim: int
    batch: int
    claim: Claim | None = None

    async def fill(
        self, wanted: Sequence[Wanted], place: Place, *, rng: random.Random | None = None
    ) -> None:
        """``place`` each of ``wanted`` with its vector, a batch at a time (see module)."""
        ordered = sorted(wanted, key=lambda item: item.key)  # the same batches in every replica
        size = self.batch
        batches = [ordered[start : start + size] for start in range(0, len(ordered), size)]
        if len(batches) == 1:  # the usual new text or two: no claim, no read
            await self._embedded(batches[0], place)
            return
        (rng or random.Random()).shuffle(batches)
        deferred: list[list[Wanted]] = []
        for group in batches:
            async with self._claimed(group, wait=False) as mine:
                if mine:
                    await self._batch(group, place)
                else:  # another process is embedding these: read them back at the end
                    deferred.append(group)
        for group in deferred:
            async with self._claimed(group, wait=True):
                await self._batch(group, place)

    async def _batch(self, group: list[Wanted], place: Place) -> None:
        found = await self._stored_meanwhile(group)
        for item in group:
            if item.key in found:
                place(item, found[item.key])
        rest = [item for item in group if item.key not in found]
        if rest:
            await self._embedded(rest, place)

    async def _embedded(self, group: list[Wanted], place: Place) -> None:
        vectors = await self.embed([item.text for item in group])
        for item, vector in zip(group, vectors, strict=True):
            place(item, vector)
        await self.save([(item.key, item.digest) for item in group], vectors)

    @asynccontextmanager
    async def _claimed(self, group: list[Wanted], *, wait: bool) -> AsyncGenerator[bool]:
        if self.claim is None:
            yield True
            return
        async with self.claim([item.key for item in group], wait) as mine:
            yield mine

    async def _stored_meanwhile(self, group: list[Wanted]) -> dict[str, Vector]:
        try:
            saved = await self.stored([item.key for item in group])
        except PmlError as error:  # embedded here, as if nobody had stored them
            logger.debug("stored vectors not read back: %s", error)
            return {}
        found: dict[str, Vector] = {}
        for item in group:
            vector = decoded(saved.get(item.key), item.digest, self.dim)
            if vector is not None:
                found[item.key] = vector
        return found
