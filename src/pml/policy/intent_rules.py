"""The intent router's rules without a model: fast-path prefixes and keyword heuristics.

    >>> route_heuristic("read a.json and write b.json").decided_by
    'heuristic:file_write'
    >>> route_heuristic("/search rust async runtimes").intent
    'lookup_search'

A prefix (``/search``, ``/chat``, ``/browse``, ``/file``, ``/system``) at the very start,
followed by whitespace or the end, decides with confidence 1.0. Otherwise the text (its
first ``MAX_INTENT_CHARS`` characters) is normalised — NFKD, accents and invisible format
characters (zero-width, bidi controls) dropped, case-folded — URLs and file paths are
replaced by markers, and the word rules below are tried in order; the first that matches
decides. Each regular expression is a bounded alternation of words, so a text is read in
linear time whatever it holds.

======================  ===============  =====  ==================================================
rule                    intent           conf.  matches
======================  ===============  =====  ==================================================
memory_recall           memory_read      0.9    "do you remember", "what did I tell you", "recall"
remember                memory_write     0.9    "remember that", "don't forget", "save to memory"
memory_noun             memory_r/w       0.8    "memory" / "knowledge graph" (write verb: write)
screen                  screen_observe   0.85   screen, screenshot, active window
research                one_shot_disc.   0.8    "research", or compare / find out + web words
web_search              lookup_search    0.9    "search the web", google, "latest news"
system                  system_task      0.85   run / execute / install / shell / terminal
file_delete             file_edit        0.9    delete / remove / erase + a file or path
file_write              file_edit        0.8    write / create / edit / save ... + a file word
                                         0.9    ... + an explicit path or file name
git_write               file_edit        0.85   commit / stage / checkout / switch branch
url                     browse_once      0.75   a URL (0.9 with open / visit / fetch ...)
file_read               file_task        0.8    read / list / show / count ... + a file word
                                         0.85   ... + an explicit path or file name
memory_thing            memory_write     0.7    a write verb + fact / entity / relation / note
change                  edit_task        0.6    any other write verb (no file named)
file_mention            file_task        0.7    a path, file name or glob alone
browse_page             browse_once      0.8    open / visit / fetch + page / website / link
clock                   general (time)   0.8    "what time is it", "time zone", "current date"
current_info            lookup_search    0.7    search for, look up, news, weather, price of
page_mention            browse_once      0.6    a page, website, link or URL named
small_talk              chat_only        0.75   greetings, thanks, jokes, "how are you"
fallback                general          0.3    nothing matched
======================  ===============  =====  ==================================================

Writes beat reads (``file_write`` is tried before ``file_read``). A request whose main verb
is a file verb and that names a file does not become a ``system`` task because it mentions
"install" or "build" ("update the install notes in README.md"). French verbs and nouns
of the common cases are understood too (lis, écris, supprime, fichier, dossier, ...).
"""

from __future__ import annotations

import re
from typing import Final

from pml.errors import InvalidInput
from pml.policy.intent_text import PATH_MARK, URL_MARK, word_string
from pml.policy.model import FALLBACK_INTENT, PermissionCapability, RiskLevel, RouterOutput

MAX_INTENT_CHARS: Final = 4000

INTENT_NEEDS: Final[dict[str, tuple[PermissionCapability, ...]]] = {
    "chat_only": (),
    "lookup_search": ("web_search",),
    "browse_once": ("network", "browser"),
    "one_shot_discovery": ("web_search", "network", "browser"),
    "screen_observe": ("screen_read",),
    "file_task": ("file_read",),
    "file_edit": ("file_read", "file_write"),
    "system_task": ("system_execute",),
    "memory_read": ("memory_read",),
    "memory_write": ("memory_write",),
    "edit_task": ("file_write", "memory_write"),
    FALLBACK_INTENT: (),
}
INTENT_RISK: Final[dict[str, RiskLevel]] = {
    "system_task": "high",
    "file_edit": "medium",
    "memory_write": "medium",
    "edit_task": "medium",
    "browse_once": "medium",
    "one_shot_discovery": "medium",
}

_PREFIXES: Final[dict[str, str]] = {
    "/search": "lookup_search",
    "/chat": "chat_only",
    "/browse": "browse_once",
    "/file": "file_task",
    "/system": "system_task",
}
_PREFIX = re.compile(r"(/[a-z]+)(?:\s|$)", re.IGNORECASE)


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Words skipped to find a request's main verb ("can you please read ..." -> "read").
_FILLERS: Final = _set(
    "please pls can could would will you u i want need like to let s lets me us now then ok "
    "okay hey hi hello so just also quickly kindly go ahead and je veux tu peux pourrais vous "
    "pouvez stp svp"
)


def _any(*alternatives: str) -> re.Pattern[str]:
    """One word-bounded alternation over the normalised word string."""
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b")


# Rules read the normalised word string: lower case, no accents, "what's" -> "what s".
_MEMORY_RECALL = _any(
    r"(?:do|did|can|could) you (?:still )?(?:remember|recall)",
    r"what do you (?:remember|recall|know about me)",
    r"what (?:did|have) i (?:tell|told|say|said|ask|asked|mention|mentioned|share|shared)",
    r"did i (?:tell|mention|say|share)",
    r"recall (?:what|my|the|when|where|who|everything)|remind me (?:what|of|who|where|when|my)",
    r"what (?:is|s|was|are|were) my (?:name|birthday|favou?rite \w+|preferences?|age|job)",
    r"(?:anything|everything|what|things) you (?:remember|recall|know|stored|saved|noted)",
    r"tu te souviens|te souviens tu|vous souvenez|rappelle moi|que sais tu de moi",
    r"qu est ce que je t ai dit",
)
_REMEMBER = _any(
    r"remember|memori[sz]e|(?:don t|dont|do not|never) forget",
    r"forget (?:that|this|it|my|about|everything|what)",
    r"(?:make|take) (?:a )?note|note (?:that|this|down)|jot (?:this |that |it )?down",
    r"(?:keep|bear) (?:this |that |it )?in mind",
    r"(?:save|store|add|put|record|keep|write) (?:\w+ ){0,4}(?:to|in|into) (?:your |my |the )?"
    r"(?:memory|memories|long term memory)",
    r"souviens toi|retiens|n oublie pas|note que|memorise|garde en memoire",
)
_MEMORY_NOUN = _any(r"memory|memories|knowledge graph|memoire")
# What a knowledge-graph memory holds: with a write verb and no file, a memory write.
_MEMORY_THING = _any(
    r"facts?|entit(?:y|ies)|relations?|relationships?|observations?|details?|notes?|knowledge"
)
_MEMORY_NOT_STORE = _any(
    r"ram|usage|leaks?|gb|mb|process(?:es)?|out of memory|free up|how much memory",
    r"memory (?:use|used|uses|consumption|footprint)",
)
_SCREEN = _any(
    r"screens?|screenshots?|screencap|screen capture|what am i looking at|ecran|fenetre",
    r"(?:active|current|focused|foreground|open|this|which) windows?",
)
_WEB_WORDS = _any(
    r"web|online|internet|sources?|articles?|reviews?|websites?|blogs?|forums?|reddit|news",
    r"benchmarks?",
    URL_MARK,
)
_RESEARCH = _any(r"research(?:ing)?|investigate|deep dive|literature review|in depth report")
_COMPARE = _any(
    r"compare|comparison|find out|look into|dig into|pros and cons|which is (?:the )?best",
    r"evaluate",
)
_WEB_SEARCH = _any(
    r"search (?:the )?(?:web|internet|online)|(?:web|online|internet|google) search",
    r"google|bing|duckduckgo",
    r"look (?:\w+ )?up (?:online|on the web|on the internet)",
    r"(?:find|search|check) (?:\w+ ){0,3}(?:online|on the web|on the internet)",
    r"(?:latest|breaking|recent|today s|current) news|news (?:about|on|from)|headlines",
    r"(?:cherche|chercher|recherche|rechercher) (?:sur )?(?:le web|internet|google)|actualites",
)
_SYSTEM = _any(
    r"run(?:s|ning)?|execute[sd]?|executing|exec|launch|(?:un|re)?install(?:s|ing)?|compile",
    r"deploy|kill|restart|reboot|shutdown|sudo|chmod|chown|systemctl|curl|wget",
    r"pytest|npm|npx|pip3?|apt(?: get)?|brew|yarn|cargo|docker|kubectl",
    r"shell|terminal|bash|zsh|powershell|command line|commands?|cli|cmd|processes",
    r"env(?:ironment)? var(?:iable)?s?|environment of",
    r"git (?:push|pull|clone|fetch)|make (?:build|install|test|all|clean)",
    r"build (?:the |my |this |our )?(?:project|app|application|code|package|binary|image)",
    r"(?:the |unit |integration )tests|test suite",
    r"(?:update|upgrade) (?:the |my |all )?(?:system|packages|dependencies|deps)",
    r"lance|lancer|installe|installer|commande|redemarre",
)
# A system verb starting a later clause ("read a.txt then run it") is a system task.
_SYSTEM_CLAUSE = _any(
    r"(?:and|then|also) (?:then |also )?(?:run|execute|install|build|compile|deploy|launch)"
)
_DELETE = _any(
    r"delet(?:e|es|ed|ing)|remov(?:e|es|ed|ing)|rm|rmdir|erase|wipe|purge|trash|destroy",
    r"overwrite|supprime|supprimer|efface|effacer",
)
_WRITE = _any(
    r"writ(?:e|es|ing)|wrote|creat(?:e|es|ing)|sav(?:e|es|ing)|edit(?:s|ing)?|change",
    r"modif(?:y|ies|ying)|updat(?:e|es|ing)|renam(?:e|es|ing)|mov(?:e|es|ing)|mv|cp",
    r"cop(?:y|ies|ying)|append(?:s|ing)?|insert|add|mkdir|touch|replace|fix|refactor|patch",
    r"swap|set ?up|relocate|put|place|clear|reset|unlink|link|store|record|attach|tag",
    r"register|switch|undo|restore|take (?:\w+ )?out",
    r"make (?:a |an |the )?(?:new )?(?:file|folder|directory|dir|copy)",
    r"ecris|ecrire|ecrit|cree|creer|enregistre|enregistrer|sauvegarde|sauvegarder",
    r"modifie|modifier|renomme|renommer|deplace|deplacer|ajoute|ajouter|copie|copier",
    r"corrige|corriger",
)
_GIT_WRITE = _any(
    r"^(?:commit|stage|unstage|checkout)",
    r"(?:to|and|then|please|now|you) (?:commit|stage|checkout)",
    r"(?:commit|stage) (?:the|my|all|these|those|it|this|that|changes|everything|them|our)",
    r"git (?:add|commit|reset|checkout|init|stash|merge|rebase|revert)",
    r"(?:new|create (?:a )?(?:new )?) branch|revert|merge|rebase|staging area|branch off",
    r"(?:go|switch|change|move) (?:back )?to (?:the )?\w+ branch",
)
_FILE_WORDS = _any(
    r"files?|folders?|director(?:y|ies)|dirs?|paths?|repos?|repositor(?:y|ies)|documents?",
    r"docs?|json|csv|tsv|yaml|yml|toml|xml|markdown|readme|spreadsheets?|logs?|config",
    r"codebase|source code|git|commits?|branch(?:es)?|diff",
    r"fichiers?|dossiers?|repertoires?",
    PATH_MARK,
)
_FILE_READ = _any(
    r"read(?:s|ing)?|open|show|display|list(?:s|ing)?|ls|cat|find|search|grep|count",
    r"summari[sz]e|parse|load|view|print|check|inspect|look at|analy[sz]e|compare|extract",
    r"what s in|how many|git (?:status|log|diff|show|blame)",
    r"lis|lire|affiche|afficher|montre|liste|lister|cherche|trouve|compte|resume|ouvre",
)
_FILE_VERBS = re.compile("|".join(p.pattern for p in (_WRITE, _DELETE, _FILE_READ)))
_BROWSE_VERB = _any(
    r"open|visit|go to|navigate(?: to)?|browse|fetch|download|scrape|read|load|summari[sz]e",
    r"check|look at|ouvre|visite|va sur|telecharge",
)
_PAGE = _any(r"web ?pages?|websites?|sites?|pages?|links?|urls?|articles?|homepage|blog post")
_CURRENT_INFO = _any(
    r"search(?:es)? for|look (?:\w+ )?up|lookup|find (?:me )?(?:information|info|details)",
    r"who won|latest|news|weather|forecast|stock price|share price|prices? of|exchange rate",
    r"scores?|trending|current events|near me|meteo|quel temps|dernieres",
)
_CLOCK = _any(
    r"what (?:time|day|date) (?:is it|it is)|what s the (?:time|date)|what is the (?:time|date)",
    r"(?:current|local) (?:time|date)|time (?:is it|now|zone|zones|difference)|timezones?",
    r"convert (?:\w+ )?(?:time|\d{1,2} ?(?:am|pm))|today s date|quelle heure",
)
_GREETING = re.compile(
    r"^(?:hi|hello|hey|hiya|yo|howdy|greetings|good (?:morning|afternoon|evening|night|day)"
    r"|bonjour|bonsoir|salut|coucou|hola)\b"
)
_SMALL_TALK = _any(
    r"thanks?|thank you|thx|how are you|how s it going|how is it going|what s up|whats up",
    r"nice to meet you|who are you|what (?:s|is) your name|(?:a|another) joke|make me laugh",
    r"i m bored|let s chat|chat with me|talk to me|good job|well done|(?:good)?bye|see you",
    r"merci|ca va|comment vas tu|au revoir|bonne nuit",
)


def check_intent(intent: object) -> str:
    """``intent`` stripped, cut to ``MAX_INTENT_CHARS``; ``InvalidInput`` if empty or not text."""
    if not isinstance(intent, str):
        raise InvalidInput(f"intent must be a string, not {type(intent).__name__}", field="intent")
    text = intent.strip()
    if not text:
        raise InvalidInput("intent must not be empty", field="intent")
    return text[:MAX_INTENT_CHARS]


def route_prefix(text: str) -> RouterOutput | None:
    """The output of a fast-path prefix (``/search ...``), or None if ``text`` has none."""
    match = _PREFIX.match(text)
    if match is None:
        return None
    prefix = match.group(1).lower()
    intent = _PREFIXES.get(prefix)
    if intent is None:
        return None
    risk = INTENT_RISK.get(intent, "low")
    if intent == "file_task":
        rest = word_string(text[match.end() :])
        if _DELETE.search(rest):
            intent, risk = "file_edit", "high"
        elif _WRITE.search(rest) or _GIT_WRITE.search(rest):
            intent, risk = "file_edit", "medium"
    return _output(intent, 1.0, f"prefix:{prefix}", risk)


def route_heuristic(intent: str) -> RouterOutput:
    """Classify ``intent`` with the prefixes and the keyword rules (pure, no I/O)."""
    text = check_intent(intent)
    return route_prefix(text) or _classify(word_string(text))


def _output(
    intent: str, confidence: float, decided_by: str, risk: RiskLevel | None = None
) -> RouterOutput:
    return RouterOutput(
        intent=intent,
        needs=INTENT_NEEDS[intent],
        risk_level=risk or INTENT_RISK.get(intent, "low"),
        confidence=confidence,
        decided_by=decided_by,
    )


def _rule(intent: str, confidence: float, name: str, risk: RiskLevel | None = None) -> RouterOutput:
    return _output(intent, confidence, f"heuristic:{name}", risk)


def _classify(s: str) -> RouterOutput:
    """The first rule (of the module table) that matches the word string ``s``."""
    has_url = URL_MARK in s
    has_path = PATH_MARK in s
    file_object = has_path or _FILE_WORDS.search(s) is not None
    if _MEMORY_RECALL.search(s):
        return _rule("memory_read", 0.9, "memory_recall")
    if _REMEMBER.search(s):
        return _rule("memory_write", 0.9, "remember")
    if _MEMORY_NOUN.search(s) and (not _MEMORY_NOT_STORE.search(s) or _DELETE.search(s)):
        if _WRITE.search(s) or _DELETE.search(s):
            return _rule("memory_write", 0.8, "memory_noun")
        return _rule("memory_read", 0.8, "memory_noun")
    if _SCREEN.search(s):
        return _rule("screen_observe", 0.85, "screen")
    if _RESEARCH.search(s) or (_COMPARE.search(s) and _WEB_WORDS.search(s)):
        return _rule("one_shot_discovery", 0.8, "research")
    if _WEB_SEARCH.search(s):
        return _rule("lookup_search", 0.9, "web_search")
    if _SYSTEM.search(s) and not (
        file_object and _lead_is_file_verb(s) and not _SYSTEM_CLAUSE.search(s)
    ):
        return _rule("system_task", 0.85, "system")
    if file_object and _DELETE.search(s):
        return _rule("file_edit", 0.9, "file_delete", "high")
    if file_object and _WRITE.search(s):
        return _rule("file_edit", 0.9 if has_path else 0.8, "file_write")
    if _GIT_WRITE.search(s):
        return _rule("file_edit", 0.85, "git_write")
    if has_url:
        return _rule("browse_once", 0.9 if _BROWSE_VERB.search(s) else 0.75, "url")
    if file_object and _FILE_READ.search(s):
        return _rule("file_task", 0.85 if has_path else 0.8, "file_read")
    if _WRITE.search(s) or _DELETE.search(s):  # a change, of something not named as a file
        if _MEMORY_THING.search(s):
            return _rule("memory_write", 0.7, "memory_thing")
        return _rule("edit_task", 0.6, "change")
    if file_object and has_path:
        return _rule("file_task", 0.7, "file_mention")
    if _BROWSE_VERB.search(s) and _PAGE.search(s):
        return _rule("browse_once", 0.8, "browse_page")
    if _CLOCK.search(s) and not _CURRENT_INFO.search(s):  # the clock: the read-only row
        return RouterOutput(FALLBACK_INTENT, ("time",), "low", 0.8, "heuristic:clock")
    if _CURRENT_INFO.search(s):
        return _rule("lookup_search", 0.7, "current_info")
    if _PAGE.search(s):
        return _rule("browse_once", 0.6, "page_mention")
    if file_object:
        return _rule("file_task", 0.7, "file_mention")
    if _GREETING.search(s) or _SMALL_TALK.search(s):
        return _rule("chat_only", 0.75, "small_talk")
    return _output(FALLBACK_INTENT, 0.3, "fallback")


def _lead_is_file_verb(s: str) -> bool:
    """Whether the request's main verb (its first word past "please", "can you" ...) is a
    file verb."""
    for word in s.split(" ", 12)[:12]:
        if word not in _FILLERS:
            return _FILE_VERBS.fullmatch(word) is not None
    return False
