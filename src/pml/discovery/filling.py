"""Embedding the texts the index lacks, in batches, without redoing another replica's work.

    wanted = [Wanted(key="tool:fs:read", digest=text_hash(text), text=text), ...]
    async for item, vector in fill(wanted, embed=..., stored=..., save=..., dim=384):
        place(item, vector)

Replicas of one database that start together all find the same texts unstored, and each
would embed every one of them (the store's upsert keeps the last). When there is more than
one batch, the batches are cut from the texts sorted by key (the same batches in every
replica) and a process takes them in an order of its own (random). For each batch it:

- takes the batch's claim (``claim``: on PostgreSQL an advisory lock, held until the batch's
  vectors are stored; ``pml.storage.embed_claims``). A batch another replica holds is left
  for the end;
- reads back which of the batch's keys another process stored meanwhile (same text hash, same model): those are used as stored, not embedded;
- embeds the rest and stores them.

Then, for each batch left for the end, it waits for the holder's claim and reads the batch
back (embedding only what the holder did not store, if it died). Two replicas started
together embed each text once between them; a replica alone embeds everything as before and
pays a claim and a read of at most ``batch`` keys per batch (~2 ms, against ~0.3 s to embed
a batch). A single batch (the usual new capability) is embedded with neither.

A failed read counts as nothing stored; a failed save is logged by ``save`` (the vectors are
in the index all the same). ``decoded`` is how a stored vector is taken: the right text hash
and the model's dimension, or not at all.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import numpy as np

from pml.discovery.index import Vector
from pml.errors import PmlError

logger = logging.getLogger(__name__)

Stored = Mapping[str, tuple[str, bytes]]  # key -> (text hash, float32 little-endian bytes)
# keys, wait -> whether this process embeds them now (``pml.storage.embed_claims``)
Claim = Callable[[list[str], bool], AbstractAsyncContextManager[bool]]


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


async def fill(
    wanted: Sequence[Wanted],
    *,
    embed: Callable[[list[str]], Awaitable[Vector]],
    stored: Callable[[list[str]], Awaitable[Stored]],
    save: Callable[[list[tuple[str, str]], Vector], Awaitable[None]],
    dim: int,
    batch: int,
    claim: Claim | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[tuple[Wanted, Vector]]:
    """Each of ``wanted`` with its vector, a batch at a time (see module)."""
    ordered = sorted(wanted, key=lambda item: item.key)  # the same batches in every replica
    batches = [ordered[start : start + batch] for start in range(0, len(ordered), batch)]
    if len(batches) == 1:  # the usual new text or two: no claim, no read
        async for pair in _embedded(batches[0], embed, save):
            yield pair
        return
    (rng or random.Random()).shuffle(batches)
    deferred: list[list[Wanted]] = []
    for group in batches:
        async with _claimed(claim, group, wait=False) as mine:
            if not mine:  # another replica is embedding these: read them back at the end
                deferred.append(group)
                continue
            async for pair in _batch(group, embed, stored, save, dim):
                yield pair
    for group in deferred:
        async with _claimed(claim, group, wait=True):
            async for pair in _batch(group, embed, stored, save, dim):
                yield pair


async def _batch(
    group: list[Wanted],
    embed: Callable[[list[str]], Awaitable[Vector]],
    stored: Callable[[list[str]], Awaitable[Stored]],
    save: Callable[[list[tuple[str, str]], Vector], Awaitable[None]],
    dim: int,
) -> AsyncIterator[tuple[Wanted, Vector]]:
    found = await _stored_meanwhile(stored, group, dim)
    for item in group:
        if item.key in found:
            yield item, found[item.key]
    group = [item for item in group if item.key not in found]
    if group:
        async for pair in _embedded(group, embed, save):
            yield pair


async def _embedded(
    group: list[Wanted],
    embed: Callable[[list[str]], Awaitable[Vector]],
    save: Callable[[list[tuple[str, str]], Vector], Awaitable[None]],
) -> AsyncIterator[tuple[Wanted, Vector]]:
    vectors = await embed([item.text for item in group])
    for item, vector in zip(group, vectors, strict=True):
        yield item, vector
    await save([(item.key, item.digest) for item in group], vectors)


@asynccontextmanager
async def _claimed(claim: Claim | None, group: list[Wanted], *, wait: bool) -> AsyncGenerator[bool]:
    if claim is None:
        yield True
        return
    async with claim([item.key for item in group], wait) as mine:
        yield mine


async def _stored_meanwhile(
    stored: Callable[[list[str]], Awaitable[Stored]], group: list[Wanted], dim: int
) -> dict[str, Vector]:
    try:
        saved = await stored([item.key for item in group])
    except PmlError as error:  # embedded here, as if nobody had stored them
        logger.debug("stored vectors not read back: %s", error)
        return {}
    found: dict[str, Vector] = {}
    for item in group:
        vector = decoded(saved.get(item.key), item.digest, dim)
        if vector is not None:
            found[item.key] = vector
    return found
