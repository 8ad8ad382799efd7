"""Where the secrets are inside free text: comments, docstrings, f-string text (SPEC §6.1).

``looks_secret`` (``pml.analysis.credentials``) judges a whole value; text written for people
holds a credential among ordinary words. The audit's ``pml.policy.scrub`` redacts the same
shapes from event text (a test keeps the two in agreement on comment-like text).
``secret_spans(text)`` finds the character spans to lift or redact: known key shapes
(``sk-...``, ``ghp_...``, JWTs...), the credential after ``Bearer``/``Basic``/``token``, a
URL's password, the value of ``password=...`` or ``api_key: ...``, PEM private keys (to
their end marker), the password of a ``.pgpass`` line or a ``.netrc`` entry
(``config_secrets``), a password written in prose as a pair (``login with ada / …``) or
as whose (``password for ada is …``; ``prose_credentials``), and random-looking runs of
token characters (in a path, only the random part). When ``looks_secret`` takes the whole
text for a credential and no part stands out, the whole text (stripped) is the span.

Every pattern runs in linear time; a run longer than 256 characters is data, not a token,
unless a known shape marks it (``looks_random`` draws the same line).

Example::

    >>> text = "call with Bearer q8Zt1LmX4vR7yN2kP9sJ3wB6 (see /srv/app/run.py)"
    >>> [text[a:b] for a, b in secret_spans(text)]
    ['q8Zt1LmX4vR7yN2kP9sJ3wB6']
    >>> redact_spans("# key: sk-abcdefghijklmnop1234 for prod", [(7, 30)])
    '# key: [REDACTED] for prod'
    >>> secret_spans("compute the sha256 of report_2024_final.csv")
    []
    >>> holds_secret("", ["fine", {"note": "password=hunter22 in prod"}])
    True
"""

from __future__ import annotations

import re
import string
from typing import Final, cast

from pml.analysis.config_secrets import config_file_spans
from pml.analysis.credentials import (
    CREDENTIAL_SHAPES,
    flag_spans,
    is_secret_keyword,
    keyword_words,
    looks_random,
    looks_secret,
)
from pml.analysis.prose_credentials import prose_credential_spans
from pml.analysis.token_shapes import command_line_spans

REDACTED: Final = "[REDACTED]"
MAX_TOKEN = 256

# Shapes whose whole match is the credential.
_SHAPES = CREDENTIAL_SHAPES
# ``Bearer <token>``, ``Basic <base64>``, ``token <value>``: the scheme word stays.
_SCHEME = re.compile(
    r"(?i:\b(?:bearer|basic|token)[ \t]{1,8})([A-Za-z0-9\-._~+/]{8,}=*)(?![A-Za-z0-9\-._~+/=])"
)
# ``scheme://user:password@``: the password.
_URL_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/\s:@]{0,256}:([^/\s@]{1,256})@"
)
# ``password=...``, ``"api_key": "..."``, ``token: ...``: the value, when the keyword names one.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_\-])([A-Za-z][A-Za-z0-9_\-]{0,63})"
    r"[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?"
    r"([^\s\"'&;,)}\]]{1,4096})"
)
_MAX_VALUE = 4096
# A quoted value runs to its closing quote on the same line (``password='two words'``); a
# passphrase or mnemonic is words: to the end of its line.
_QUOTED_REST = re.compile(r"[^\n]{0,256}?(?=['\"])")
_LINE_REST = re.compile(r"[^\n]{0,512}")
_PHRASE_WORDS = frozenset({"passphrase", "mnemonic"})
# Words of a sentence, which a passphrase of random words hardly holds.
_PROSE_WORDS = frozenset(
    {"a", "an", "the", "and", "or", "to", "of", "with", "for", "it", "is", "use", "never"}
    | {"not", "print", "log", "generate", "store", "in", "from", "as", "be", "then", "this"}
)
# ``api key 9d3f...``, ``secret: 4c1e...``: a key-like word, then a token (hex included).
_KEY_WORD_VALUE = re.compile(
    r"(?i:\b(?:key|token|secret|password|passwd|pwd|passphrase)"
    r"(?:[ \t]{0,4}[:=][ \t]{0,4}|[ \t]{1,4})(?:is[ \t]{1,4})?)"
    r"([A-Za-z0-9\-_.+/]{16,256}=*)(?![A-Za-z0-9\-_.+/=])"
)
# ``the password is Tr0ub4dor&3``, ``set the passcode to 83749203``: a password in prose.
_PROSE_PASSWORD = re.compile(
    r"(?i:(?<![a-z0-9])(?:[a-z0-9]{1,32}_)?(?:password|passwd|pwd|pswd|pw|passphrase|passcode)"
    r"[ \t]{0,2}[:=]?[ \t]{1,4}(?:(?:(?:it[ \t]{1,4})?(?:is|was)|to|of)[ \t]{1,4})?"
    r"|\bidentified[ \t]+by[ \t]+)"
    r"['\"]?([^\s'\"]{6,128})"
)
_VALUE_REST = re.compile(r"[^\s\"'&;,)}\]]*")
PEM_BEGIN = re.compile(r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----")
PEM_END = re.compile(r"-----END[A-Z ]{0,40}PRIVATE KEY-----")
_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_\-.~]{20,}")
_PART = re.compile(r"[^/\\?&=#:;@]+")
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\{\{[^{}]*\}\}|\*+|\[REDACTED\]"
)
_PLACEHOLDER_WORDS = frozenset(
    {"none", "null", "true", "false", "bearer", "basic", "digest", "token", "redacted"}
    | {"oauth", "oauth2", "jwt", "apikey", "api_key", "yes", "no", "on", "off", "required"}
    | {"optional", "enabled", "disabled", "xxx", "changeme"}
)
_TRAILING = ".,;:)'\""  # a password may end with ``!`` or ``?``: they stay in the span
_SPACE = re.compile(r"\s")
_FIELD = re.compile(
    r"\{[^{}]{0,64}\}|\$\{?[A-Za-z_][A-Za-z0-9_]{0,63}\}?|%(?:\([^()]{0,64}\))?[a-z]"
)


def _is_template(value: str) -> bool:
    """A field a template fills in (``{password}``, ``${DB_PASSWORD}``, ``%s``): no secret."""
    return _FIELD.fullmatch(value) is not None


def _real_value(value: str) -> bool:
    """Something a credential field could hold: not a placeholder, not only punctuation."""
    text = value.strip()
    if len(text) < 6 or not any(char.isalnum() for char in text):
        return False
    return text.lower() not in _PLACEHOLDER_WORDS and _PLACEHOLDER.fullmatch(text) is None


def _assignments(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for match in _ASSIGNMENT.finditer(text):
        keyword, value = match[1], match[2].rstrip(_TRAILING)
        if value.startswith(REDACTED[:-1]):  # already redacted
            continue
        words = keyword_words(keyword)
        config_pass = words == ["pass"] and _quoted_key(text, match)  # ``"pass": "..."``
        if words == ["auth"] or not (config_pass or is_secret_keyword(keyword)):
            continue
        if (config_pass or words[-1] == "pw") and value.isalpha():  # ``pw:api``: a label
            continue
        keyword = "password" if config_pass else keyword
        placeholder = value.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER.fullmatch(value)
        phrase = (
            not placeholder
            and not _PHRASE_WORDS.isdisjoint(keyword_words(keyword))
            and _is_phrase(text, match.start(2))
        )
        if phrase or (
            _real_value(value) and (looks_secret(keyword, value) or any(c.isdigit() for c in value))
        ):
            end = _value_end(text, match, value, phrase=phrase)
            if not _is_template(text[match.start(2) : end]):  # ``token='{token}'``
                spans.append((match.start(2), end))
    return spans


def _quoted_key(text: str, match: re.Match[str]) -> bool:
    """Whether the keyword of ``match`` is quoted (``"pass": ``, ``'pass'=``): a key of
    JSON, YAML or TOML, not a word of prose (``first pass: the names``)."""
    before = text[match.start(1) - 1] if match.start(1) > 0 else ""
    return before in "'\"" and text[match.end(1) : match.end(1) + 1] == before


def _is_phrase(text: str, start: int) -> bool:
    """Whether the words from ``start`` to the end of the line are a passphrase (random
    words), not a sentence about one (``passphrase: use diceware and print it``)."""
    rest = _LINE_REST.match(text, start)
    words = (rest[0] if rest is not None else "").lower().split()
    return 2 <= len(words) <= 24 and _PROSE_WORDS.isdisjoint(words)


def _value_end(text: str, match: re.Match[str], value: str, *, phrase: bool) -> int:
    """Where an assigned value ends: its closing quote, its line for a passphrase, else the
    first space (a longer value than ``_MAX_VALUE``: to its end, all of it)."""
    end = match.start(2) + len(value)
    opening = text[match.start(2) - 1] if match.start(2) > 0 else ""
    if opening in "'\"":
        rest = _QUOTED_REST.match(text, match.start(2))
        if rest is not None and text[rest.end()] == opening:
            return max(end, rest.end())
    if phrase:
        rest = _LINE_REST.match(text, match.start(2))
        return max(end, len(text[: rest.end()].rstrip()) if rest is not None else end)
    if len(match[2]) == _MAX_VALUE:
        rest = _VALUE_REST.match(text, match.end(2))
        return rest.end() if rest is not None else match.end(2)
    return end


def _key_word_values(text: str) -> list[tuple[int, int]]:
    """``api key 9d3f...``: a token after a key-like word, random or a long hex run; and
    ``password is Tr0ub4dor&3``: letters with digits or signs after a password word."""
    spans: list[tuple[int, int]] = []
    for match in _KEY_WORD_VALUE.finditer(text):
        value = match[1].rstrip(".")
        hexadecimal = len(value) >= 20 and all(c in string.hexdigits for c in value)
        if hexadecimal or looks_random(value):
            spans.append((match.start(1), match.start(1) + len(value)))
    for match in _PROSE_PASSWORD.finditer(text):
        value = match[1].rstrip(_TRAILING)
        digits = any(c.isdigit() for c in value)
        if digits and _real_value(value) and not value.startswith(("/", "~", "[", "(", "`")):
            spans.append((match.start(1), match.start(1) + len(value)))
    return spans


def _pem(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    begin = PEM_BEGIN.search(text)
    while begin is not None:
        end = PEM_END.search(text, begin.end())
        stop = end.end() if end is not None else len(text)
        spans.append((begin.start(), stop))
        begin = PEM_BEGIN.search(text, stop)
    return spans


def _random_runs(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for match in _CANDIDATE.finditer(text):
        run = match[0].rstrip(".")
        if len(run) > MAX_TOKEN or not looks_random(run):
            continue
        parts = [(m.start(), m.end()) for m in _PART.finditer(run) if looks_random(m[0])]
        if len(parts) == 0 or (len(parts) == 1 and parts[0] == (0, len(run))):
            spans.append((match.start(), match.start() + len(run)))
        else:  # in a path or URL, only the random parts
            spans.extend((match.start() + a, match.start() + b) for a, b in parts)
    return spans


def _merged(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, found_end in sorted(spans):
        end = found_end
        while end > start and text[end - 1] == ".":  # a sentence's full stop, not the token's
            end -= 1
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, disjoint ``(start, end)`` spans of the credentials written in ``text``."""
    if len(text) < 6:
        return []
    spans = [match.span() for match in _SHAPES.finditer(text)]
    spans += [match.span(1) for match in _SCHEME.finditer(text) if _scheme_credential(match[1])]
    spans += [m.span(1) for m in _URL_PASSWORD.finditer(text) if not _is_template(m[1])]
    spans += _assignments(text) + _pem(text) + _random_runs(text) + _key_word_values(text)
    spans += flag_spans(text) + command_line_spans(text) + config_file_spans(text)
    spans += prose_credential_spans(text)
    # The whole text judged as one value: only a single token can be a credential the finders
    # above miss (with a space in it, each of looks_secret's tests has a finder above).
    stripped = text.strip()
    if not spans and not _SPACE.search(stripped) and looks_secret("", stripped):
        start = text.index(stripped) if stripped else 0
        spans.append((start, start + len(stripped)))
    return _merged(text, spans)


def _scheme_credential(value: str) -> bool:
    """After ``Bearer``/``token``: a credential, not a word (``token expired``)."""
    if value.isalpha() and len(value) < 20:
        return False
    return _real_value(value) and value != REDACTED


def redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by ``[REDACTED]``."""
    parts: list[str] = []
    cursor = 0
    for start, end in spans:
        parts.extend((text[cursor:start], REDACTED))
        cursor = end
    parts.append(text[cursor:])
    return "".join(parts)


def holds_token(text: str) -> bool:
    """Whether a label (a capability name, a tag) holds a credential by its shape alone: a
    known token, a private key or a random-looking run. Labels are ``key:value`` pairs
    (``token:github``, ``password:rotated``): a credential word in one names a topic."""
    return _SHAPES.search(text) is not None or bool(_pem(text) or _random_runs(text))


def holds_secret(keyword: str, value: object) -> bool:
    """``looks_secret``, or a credential written inside any string of ``value``."""
    if looks_secret(keyword, value):
        return True
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if secret_spans(item):
                return True
        elif isinstance(item, dict):
            stack.extend(cast("dict[object, object]", item).keys())
            stack.extend(cast("dict[object, object]", item).values())
        elif isinstance(item, list | tuple):
            stack.extend(cast("list[object]", item))
    return False
