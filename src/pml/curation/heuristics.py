"""Heuristic names for capabilities: ``namespace:action`` from the tools used and the intent.

    >>> guess = guess_name("read and parse JSON config file",
    ...                    ["filesystem:read_text_file", "filesystem:write_file"])
    >>> guess.name, guess.tools_match, guess.intent_clarity
    ('fs:read_json_config', 1.0, 1.0)
    >>> guess_name("", ["filesystem:read", "filesystem:write"]).name
    'fs:read_write'
    >>> confidence(tools_match=1.0, intent_clarity=1.0, uniqueness=0.5)
    0.8

The namespace is the short form of the dominant server among the tools used (``filesystem``
→ ``fs``, others their own name; the first one seen wins a tie; no tools → ``code``). The
action is ``verb_object`` in snake case from the intent: filler words dropped, synonyms of a
few common verbs made one (``fetch``/``retrieve`` → ``get``, ``load`` → ``read``, ...),
generic nouns (``file``, ``data``) kept only when nothing more specific is said, and words
that repeat a short namespace dropped (``fs``, ``filesystem``); at most three object words
and 40 characters. Without a
usable intent the action comes from the tools' names.

Scores, each in [0, 1] (SPEC §6.5: confidence = 0.3·tools + 0.3·intent + 0.4·uniqueness):

- ``tools_match``: the share of the tools used whose server gives the name's namespace
  (0.5 with no tools at all: ``code`` is then a default, not evidence).
- ``intent_clarity``: 0.4 if the intent has a recognised verb, 0.4 × min(objects, 2) / 2 for
  its object words, 0.2 × brevity (1 up to six content words, falling to 0 at sixteen);
  0 when the intent says nothing usable.
- ``uniqueness``: 1 when the name is free, 1/k when it needed the suffix ``_k`` (see
  ``pml.curation.collisions``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pml.registry.names import (
    DEFAULT_NAMESPACE,
    SHORT_NAMESPACES,
    namespace_for_server,
    server_of,
    tool_ref_parts,
)

MAX_NAMESPACE: Final = 20
MAX_ACTION: Final = 40
MAX_OBJECTS: Final = 3
FALLBACK_ACTION: Final = "snippet"
_WORD = re.compile(r"[a-z0-9]+")
_TOKEN = re.compile(r"[a-z0-9]+|[,;]")
CONJUNCTIONS: Final = frozenset({"and", "then", "or", "plus", ",", ";"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_MAX_WORD = 24


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS: Final = _word_set(
    """a an the and or but nor of to for from in on at by with without into onto as is are
    was were be been being it its this that these those my our your their his her me us them
    i we you they some any all each every then than so if when while please just also via
    using use used based about over under out up can could would should will shall may might
    must do does did done how what which who whom whose where why there here given
    specified specific certain etc eg ie e g want wants need needs like let lets s t one
    something anything everything thing things stuff way new only more most other same
    again back whatever per"""
)
GENERIC_NOUNS: Final = _word_set(
    """file files data content contents item items value values result results info
    information text output input object objects entry entries record records"""
)
# Synonyms made one; every verb listed maps to itself unless given here.
VERB_SYNONYMS: Final = {
    "fetch": "get",
    "retrieve": "get",
    "obtain": "get",
    "grab": "get",
    "pull": "get",
    "load": "read",
    "open": "read",
    "cat": "read",
    "save": "write",
    "store": "write",
    "persist": "write",
    "dump": "write",
    "make": "create",
    "remove": "delete",
    "erase": "delete",
    "rm": "delete",
    "purge": "delete",
    "modify": "update",
    "edit": "update",
    "change": "update",
    "patch": "update",
    "enumerate": "list",
    "ls": "list",
    "locate": "find",
    "lookup": "find",
    "grep": "find",
    "analyse": "analyze",
    "inspect": "analyze",
    "examine": "analyze",
    "summarise": "summarize",
    "compute": "calculate",
    "verify": "validate",
    "execute": "run",
    "exec": "run",
    "invoke": "run",
    "display": "show",
    "print": "show",
    "view": "show",
}
VERBS: Final = frozenset(VERB_SYNONYMS) | _word_set(
    """get read write create delete update list find search query parse extract analyze
    summarize calculate validate check run show send notify post upload download copy move
    rename sync backup restore convert transform count compare merge sort filter format
    render translate classify clean resize compress archive install deploy build generate
    add set clear insert append split join group aggregate map scan monitor watch test lint
    commit push diff scrape crawl publish schedule import export encode decode encrypt
    decrypt hash sign tag index collect review report fix refactor open close start stop
    fill resolve measure plot chart draw predict train evaluate benchmark ping"""
)


@dataclass(frozen=True, slots=True)
class NameGuess:
    """A heuristic ``namespace:action`` with the two scores it earns before collisions."""

    namespace: str
    action: str
    tools_match: float
    intent_clarity: float
    from_intent: bool

    @property
    def name(self) -> str:
        """The display name ``namespace:action``."""
        return f"{self.namespace}:{self.action}"


def guess_name(intent: str | None, tools_used: Sequence[str]) -> NameGuess:
    """The heuristic name of a capability (see module)."""
    namespace = dominant_namespace(tools_used)
    noise = _noise(namespace, tools_used)
    words = intent_words(intent or "")
    action = action_from_words(words, noise)
    from_intent = action is not None
    if action is None:
        action = action_from_tools(tools_used) or FALLBACK_ACTION
    return NameGuess(
        namespace=namespace,
        action=action,
        tools_match=tools_match(namespace, tools_used),
        intent_clarity=intent_clarity(intent or "", noise) if from_intent else 0.0,
        from_intent=from_intent,
    )


def confidence(*, tools_match: float, intent_clarity: float, uniqueness: float) -> float:
    """0.3·tools match + 0.3·intent clarity + 0.4·uniqueness, rounded to 3 decimals."""
    return round(0.3 * tools_match + 0.3 * intent_clarity + 0.4 * uniqueness, 3)


def dominant_namespace(tools_used: Sequence[str]) -> str:
    """The namespace most of the tools give (first seen wins a tie); ``code`` without tools."""
    counts = Counter(_namespace_of(tool) for tool in tools_used)
    counts.pop(None, None)
    if not counts:
        return DEFAULT_NAMESPACE
    best = max(counts.values())
    first = next(ns for ns in counts if counts[ns] == best)  # Counter keeps insertion order
    return first or DEFAULT_NAMESPACE


def tools_match(namespace: str, tools_used: Sequence[str]) -> float:
    """The share of the tools used whose server gives ``namespace`` (0.5 with no tools)."""
    if not tools_used:
        return 0.5
    matching = sum(1 for tool in tools_used if _namespace_of(tool) == namespace)
    return round(matching / len(tools_used), 3)


def intent_clarity(intent: str, noise: frozenset[str] = frozenset()) -> float:
    """How clearly an intent says what the code does, in [0, 1] (see module)."""
    words = intent_words(intent)
    if not words:
        return 0.0
    verb, objects = _verb_and_objects(words, noise)
    brevity = 1.0 if len(words) <= 6 else max(0.0, 1 - (len(words) - 6) / 10)
    score = 0.4 * (verb is not None) + 0.4 * min(len(objects), 2) / 2 + 0.2 * brevity
    return round(score, 3)


def intent_words(text: str) -> list[tuple[str, bool]]:
    """The content words of ``text`` (lower-case ASCII, no filler or digits), each with
    whether it opens a new clause (it follows ``and``, ``then``, ``or``, ``,`` or ``;``)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words: list[tuple[str, bool]] = []
    opens = True
    for token in _TOKEN.findall(_CAMEL.sub(" ", ascii_text).lower()):
        if token in CONJUNCTIONS:
            opens = True
        elif token not in STOP_WORDS and not token.isdigit() and len(token) <= _MAX_WORD:
            words.append((token, opens))
            opens = False
    return words


def action_from_words(words: Sequence[tuple[str, bool]], noise: frozenset[str]) -> str | None:
    """``verb_object`` from an intent's words; None when they name nothing."""
    verb, objects = _verb_and_objects(words, noise)
    if verb is None:
        return _join(objects[: MAX_OBJECTS + 1])
    return _join([VERB_SYNONYMS.get(verb, verb), *objects[:MAX_OBJECTS]])


def action_from_tools(tools_used: Sequence[str]) -> str | None:
    """An action from the names of the tools used (``read_file`` + ``write_file`` →
    ``read_write_file``); None without tools."""
    names: list[list[str]] = []
    for tool in tools_used:
        words = _snake_words(_tool_part(tool))
        if words and words not in names:
            names.append(words)
    if not names:
        return None
    if len(names) == 1:
        return _join(names[0])
    first, second = names[0], names[1]
    if len(first) > 1 and first[1:] == second[1:]:  # same object, two verbs
        return _join([first[0], second[0], *first[1:]])
    if len(first) == 1 and len(second) == 1:
        return _join([first[0], second[0]])
    return _join([*first, *second])


def _verb_and_objects(
    words: Sequence[tuple[str, bool]], noise: frozenset[str]
) -> tuple[str | None, list[str]]:
    """The first verb, and the object words: not the verbs of later clauses ("read and
    parse"), not noise, generic nouns only when nothing more specific is said."""
    verb = next((word for word, _ in words if word in VERBS), None)
    rest: list[str] = []
    seen_verb = False
    for word, opens_clause in words:
        if word == verb and not seen_verb:
            seen_verb = True
        elif word not in noise and not (word in VERBS and (opens_clause or not seen_verb)):
            rest.append(word)
    specific = [word for word in rest if word not in GENERIC_NOUNS]
    return verb, list(dict.fromkeys(specific or rest))


def _join(parts: Sequence[str]) -> str | None:
    """Words joined with ``_``, cut at a word boundary to ``MAX_ACTION`` characters."""
    action = ""
    for part in parts:
        candidate = f"{action}_{part}" if action else part
        if len(candidate) > MAX_ACTION:
            break
        action = candidate
    return action or None


def _snake_words(name: str) -> list[str]:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return [w for w in _WORD.findall(_CAMEL.sub(" ", ascii_name).lower()) if len(w) <= _MAX_WORD]


def _tool_part(tool: str) -> str:
    """The tool (or capability action) a tool reference names."""
    parts = tool_ref_parts(tool)
    if parts is not None:
        return parts[1]
    for separator in (":", "__", "."):  # half a reference ("server:", ":tool"): its rest
        _, sep, rest = tool.partition(separator)
        if sep:
            return rest
    return tool


def _noise(namespace: str, tools_used: Sequence[str]) -> frozenset[str]:
    """Words an action need not repeat: a short namespace and the server it stands for
    (``fs``, ``filesystem``); a server named for what it does (``time``) keeps its word."""
    servers = {server_of(tool) or "" for tool in tools_used}
    short = {server for server in servers if SHORT_NAMESPACES.get(server) == namespace}
    if not short:
        return frozenset()
    return frozenset({namespace, *(word for server in short for word in _snake_words(server))})


def _namespace_of(tool: str) -> str | None:
    server = server_of(tool)
    if server is None:
        return None
    return namespace_for_server(server).lower()[:MAX_NAMESPACE].strip("_-") or None
