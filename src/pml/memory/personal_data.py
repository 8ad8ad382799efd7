"""Personal data and sensitive categories in a memory's text: what makes a memory ``high``.

    >>> personal_data_reasons("My card number is 4111 1111 1111 1111")
    ('a payment card number', 'payment card details')
    >>> personal_data_reasons("the ssn column is encrypted at rest")
    ()

``text`` is normalised by the caller (``pml.memory.sensitivity``: NFKC, invisible
characters removed, typographic apostrophes made plain, bounded in length). Shapes are
checked on the text as written: payment cards (Luhn check), IBANs (mod-97 check), US
social security and UK national insurance numbers, phone numbers, e-mail addresses, street
addresses, coordinates. Words (``pml.memory.personal_words``) are checked on its
case-folded form with accents removed: health, finance, contacts, children, where someone
lives, dates of birth, national ids, beliefs, politics, orientation, the law, immigration.

A word found in a phrase about software does not count: followed by a software noun
(``the ssn column``, ``the tax calculation module``, ``the medication reminder app``) or
after a generic data subject (``user birthdays``, ``customer addresses``), unless a person
owns it (``my tax module``, ``Anna's diagnosis``); and no word counts in a text with code
in it (a path, a file name, ``snake_case``, backticks) that names no person (no I, me, my,
he, she ...). Shapes always count. Every pattern runs in linear time (bounded, anchored
repetitions; no nested ambiguity).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

from pml.memory.personal_words import WORD_RULES

_DIGIT_RUN = re.compile(r"(?<![\w.])\d(?:[ \-.]{0,2}\d){12,}(?![\w])")
_GROUP_SEPARATORS = re.compile(r"[ \-.]+")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_SSN = re.compile(r"(?<![\d\-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d\-])")
_UK_NINO = re.compile(r"\b[a-z]{2} ?\d{2} ?\d{2} ?\d{2} ?[a-d]\b")
_EMAIL = re.compile(
    r"(?<![\w.%+\-/])([\w.%+\-]{1,64})@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,62}\.){1,8}[A-Za-z]{2,24}\b"
)
_INTERNATIONAL_PHONE = re.compile(
    r"(?<![\w+.])(?:\+|00)(?:\d{7,15}|\d{1,3}(?:[ .\-]{1,2}\(?\d{1,8}\)?|\(\d{1,5}\)){1,6})"
    r"(?![\w])"
)
_NORTH_AMERICAN_PHONE = re.compile(r"(?<![\w(.])\(?\d{3}\)?[ .\-]\d{3}[ .\-]\d{4}(?![\w.])")
_NATIONAL_PHONE = re.compile(r"(?<![\w.])0[1-9]\d{2,3}[ \-]?\d{3}[ \-]?\d{3,4}(?![\w.])")
# Ten digits written in pairs, as in France, Belgium or Switzerland: 06 12 34 56 78.
_PAIRED_PHONE = re.compile(r"(?<![\w.+])0[1-9](?:[ .\-]\d{2}){4}(?![\w.])")
_STREET_TYPES = (
    r"(?i:street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|way|place"
    r"|terrace|square|highway|hwy|crescent|close|parkway|pkwy|circle)"
)
_ADDRESSES_AS_WRITTEN = re.compile(
    rf"\b\d{{1,5}}[A-Za-z]?,? (?:[A-Z][A-Za-z'\-]{{0,30}} ){{1,4}}{_STREET_TYPES}\b"
)
_ADDRESSES_FOLDED = (
    re.compile(
        r"\b\d{1,5}[a-z]?,? (?:rue|avenue|boulevard|chemin|all[ée]e|impasse|calle|avenida"
        r"|viale|piazza|rua|pra[çc]a|plaza) \w"
    ),
    re.compile(r"\w\w(?:strasse|str\.|weg|gasse|platz|allee|laan|straat|gatan|vej) \d"),
)
# A street named without a house number: "on Maple Avenue" (full street words only).
_NAMED_STREET = re.compile(
    r"\b(?:on|at|in|off) (?:[A-Z][a-z'\-]{1,30} ){1,3}"
    r"(?:Street|Avenue|Road|Lane|Drive|Close|Crescent|Boulevard|Terrace)\b"
)
# Latitude, longitude with four or more decimals (about 10 m); not small fractions (0.0005).
_COORDINATES = re.compile(
    r"(?<![\d.])-?(?!0\.0)\d{1,2}\.\d{4,9}\s{0,3},\s{0,3}-?(?!0\.0)\d{1,3}\.\d{4,9}(?![\d.])"
)
_NAMED_CONTACT = re.compile(
    r"\b[A-Z][a-z]{1,30}(?:'s|s') (?:(?:cell|mobile|home|work|private|personal) )?"
    r"(?:cell|mobile|phone|number|e-?mail|address|birthday|whatsapp) (?:number |address )?"
    r"(?:is|=|:)"
)
_NOT_PERSONAL_EMAIL = frozenset({"git"})  # git@github.com:org/repo.git is a remote, not mail


def luhn_valid(digits: str) -> bool:
    """Whether a string of ASCII digits passes the Luhn check (payment card numbers do)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def has_card_number(text: str) -> bool:
    """A 13-19 digit payment card number: consecutive digit groups of one run (spaces,
    dashes or dots between them, each group three digits or more, as cards are written)
    that pass the Luhn check."""
    for match in _DIGIT_RUN.finditer(text):
        groups = _GROUP_SEPARATORS.split(match[0])
        for start in range(len(groups)):  # at most 6 groups of 3+ digits from each start
            digits = ""
            for group in groups[start : start + 7]:
                digits += group
                if len(group) < 3 or len(digits) > 19:
                    break
                if len(digits) >= 13 and digits.isascii() and luhn_valid(digits):
                    return True
    return False


def _iban_valid(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34 or not compact.isascii():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def has_iban(text: str) -> bool:
    """An IBAN (country code, check digits, account) whose mod-97 check holds."""
    return any(_iban_valid(match[0]) for match in _IBAN.finditer(text.upper()))


def has_phone_number(text: str) -> bool:
    """An international (8-15 digits), North American or national phone number."""
    for match in _INTERNATIONAL_PHONE.finditer(text):
        if 8 <= sum(char.isdigit() for char in match[0]) <= 15:
            return True
    return (
        _NORTH_AMERICAN_PHONE.search(text) is not None
        or _NATIONAL_PHONE.search(text) is not None
        or _PAIRED_PHONE.search(text) is not None
    )


def has_email(text: str) -> bool:
    """An e-mail address (``git@host:repo`` remotes aside)."""
    return any(match[1].casefold() not in _NOT_PERSONAL_EMAIL for match in _EMAIL.finditer(text))


def _has_address(text: str, folded: str) -> bool:
    return (
        _ADDRESSES_AS_WRITTEN.search(text) is not None
        or _NAMED_STREET.search(text) is not None
        or any(pattern.search(folded) is not None for pattern in _ADDRESSES_FOLDED)
    )


_SHAPES: Final[tuple[tuple[str, Callable[[str, str], bool]], ...]] = (
    ("a payment card number", lambda text, _folded: has_card_number(text)),
    ("a bank account number", lambda text, _folded: has_iban(text)),
    (
        "a national id number",
        lambda text, folded: _SSN.search(text) is not None or _UK_NINO.search(folded) is not None,
    ),
    ("a phone number", lambda text, _folded: has_phone_number(text)),
    ("an e-mail address", lambda text, _folded: has_email(text)),
    ("a street address", _has_address),
    ("a precise location", lambda text, _folded: _COORDINATES.search(text) is not None),
    ("someone's contact details", lambda text, _folded: _NAMED_CONTACT.search(text) is not None),
)


# Nouns that make a sensitive word a software phrase: "the ssn column", "the tax module".
_SOFTWARE_NOUN_AFTER = re.compile(
    r"(?:[\s\-_']{1,3}\w{1,24}){0,2}?[\s\-_']{1,3}(?:columns?|fields?|tables?|modules?"
    r"|widgets?|apps?|applications?|backends?|frontends?|services?|microservices?|apis?"
    r"|endpoints?|inputs?|parsers?|features?|forms?|pages?|screens?|schemas?|models?"
    r"|calculators?|validators?|validation|flows?|configs?|configuration|logic|components?"
    r"|librar(?:y|ies)|packages?|scripts?|jobs?|quer(?:y|ies)|datasets?|fixtures?|mocks?"
    r"|enums?|classes|handlers?|controllers?|templates?|dashboards?|repos?|repositor(?:y|ies)"
    r"|plugins?|sdks?|dropdowns?|pickers?|checkbox(?:es)?|buttons?|pipelines?"
    r"|integrations?|icons?|logos?|demo|mockups?|tickets?|docs|documentation|unit tests?"
    r"|test (?:suite|cases?|data)|placeholders?|numbers|ids|strings|values|formats?)\b"
)
# A person owns the word: "my tax module", "Anna's diagnosis", "her visa".
_OWNER_BEFORE = re.compile(r"(?:\b(?:my|his|her|their|your)|\w's|s')(?: [\w\-]+){0,2} $")
_OWNED = re.compile(r"(?:my|his|her|their|your)\b")
# Generic data subjects: "user birthdays", "customers' addresses".
_DATA_SUBJECT_BEFORE = re.compile(
    r"\b(?:users?|customers?|clients?|patients?|employees?|members?|visitors?|applicants?"
    r"|people|accounts?|profiles?)(?:'s|s'|')? $"
)
_CODE_TOKEN = re.compile(
    r"`[^`\n]{1,200}`|\b[\w.\-]{1,64}/[\w.\-/]{0,200}\.[A-Za-z]{1,5}\b"
    r"|\b\w{1,64}\.(?:py|ts|tsx|js|jsx|go|rs|rb|java|kt|sql|ya?ml|json|toml|ini|cfg|csv|md)\b"
    r"|\b[a-z][a-z0-9]{0,30}_[a-z0-9_]{1,40}\b|\b[a-z]{2,30}[A-Z][A-Za-z]{1,30}\b"
)
_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|he|she|him|her|his|hers)\b")
_CONTEXT_CHARS: Final = 48


def plain(folded: str) -> str:
    """``folded`` without accents (``médicament`` is ``medicament``); ASCII is unchanged."""
    if folded.isascii():
        return folded
    decomposed = unicodedata.normalize("NFKD", folded)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def _about_software(words: str, start: int, end: int) -> bool:
    """Whether the word found at ``words[start:end]`` names a piece of software or data."""
    before = words[max(0, start - _CONTEXT_CHARS) : start]
    if _OWNER_BEFORE.search(before) is not None or _OWNED.match(words, start) is not None:
        return False
    after = words[end : end + _CONTEXT_CHARS]
    return (
        _SOFTWARE_NOUN_AFTER.match(after) is not None
        or _DATA_SUBJECT_BEFORE.search(before) is not None
    )


def _word_reasons(text: str, folded: str) -> list[str]:
    words = plain(folded)
    if _CODE_TOKEN.search(text) is not None and _PERSON.search(words) is None:
        return []  # a text about code that names nobody
    found: list[str] = []
    for reason, pattern in WORD_RULES:
        if any(not _about_software(words, m.start(), m.end()) for m in pattern.finditer(words)):
            found.append(reason)
    return found


def personal_data_reasons(text: str, folded: str | None = None) -> tuple[str, ...]:
    """Why ``text`` holds personal data or a sensitive category (empty: nothing found).

    ``folded`` is ``text.casefold()`` when the caller has it already."""
    folded = text.casefold() if folded is None else folded
    found = [reason for reason, check in _SHAPES if check(text, folded)]
    found.extend(_word_reasons(text, folded))
    return tuple(dict.fromkeys(found))
