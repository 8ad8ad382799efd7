"""Personal data and sensitive categories in a memory's text: what makes a memory ``high``.

    >>> personal_data_reasons("My card number is 4111 1111 1111 1111")
    ('a payment card number', 'payment card details')
    >>> personal_data_reasons("the repo uses tabs")
    ()

``text`` is normalised by the caller (``pml.memory.sensitivity``: NFKC, invisible
characters removed, typographic apostrophes made plain, bounded in length). Shapes are
checked on the text as written: payment cards (Luhn check), IBANs (mod-97 check), US
social security and UK national insurance numbers, phone numbers, e-mail addresses, street
addresses, coordinates. Words are checked on its case-folded form: health, finance,
contacts, where someone lives, dates of birth, national ids, beliefs, politics, sexual
orientation, criminal records. Words match whole (``syntax`` is not ``tax``), and phrases
that are ordinary in software are left out on purpose: ``health check``, ``race
condition``, ``pin numpy``, ``diagnostics``, ``child process``, ``passport.js``, ``SSH key
fingerprint``, ``external drive``. Every pattern runs in linear time (bounded, anchored
repetitions; no nested ambiguity).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final


def _words(alternatives: str) -> str:
    """Whole words or phrases: ``alternatives`` is a regex alternation (``a|b c|d``)."""
    return rf"\b(?:{alternatives})\b"


def _stems(stems: str) -> str:
    """Words starting with one of the ``|``-separated stems (``diabet`` finds diabetes)."""
    return rf"\b(?:{stems})\w{{0,24}}"


_RELATION = (
    r"(?:wife|husband|partner|spouse|girlfriend|boyfriend|fianc[eé]e?|ex|mom|mum|mother|dad"
    r"|father|son|daughter|kids?|brother|sister|sibling|aunt|uncle|cousin|grandma|grandpa"
    r"|grandmother|grandfather|niece|nephew|friend|boss|colleague|coworker|co-worker"
    r"|neighbou?r|landlord|landlady|doctor|therapist|lawyer|dentist|nanny|babysitter"
    r"|roommate|flatmate|in-laws?)"
)
_CONTACT_THING = r"(?:number|phone|cell|mobile|e-?mail|address|birthday|whatsapp|contact)"

_HEALTH_STEMS = (
    "diabet|asthma|allerg|medicat|antidepress|depressi|adhd|autis|asperger|bipolar|schizo|ptsd"
    "|therap|psychiatr|psycholog|pregnan|miscarr|abortion|chemo|oncolog|cancer|tumou?r|leukemi"
    "|hypertens|cholesterol|insulin|epilep|seizure|migraine|dementia|alzheimer|parkinson"
    "|arthrit|coeliac|celiac|intoleran|disabilit|wheelchair|dyslexi|insomnia|anorexi|bulimi"
    "|suicid|infertil|contracept|menopaus|menstrua|hepatitis|thyroid|eczema|psoriasis"
    "|vaccinat|alcoholi|addict|rehab|hospital|clinic|surgery|surgeon|dentist|dental|medical"
    "|injur|sertraline|fluoxetine|prozac|zoloft|lexapro|citalopram|escitalopram|xanax"
    "|alprazolam|valium|diazepam|adderall|ritalin|methylphenidate|metformin|ozempic|wegovy"
    "|semaglutide|levothyroxine|lisinopril|atorvastatin|ibuprofen|paracetamol|acetaminophen"
    "|oxycodone|morphine|methadone|suboxone|penicillin|amoxicillin|antibiotic|epipen|inhaler"
    "|anaphyla|counsell?or|counsell?ing|nause|vomit|overdos|p(?:a|ae)ediatric|obstetric"
    "|(?:cardi|neur|dermat|gyn(?:a|ae)?ec|ur|onc|endocrin|gastroenter|rheumat|immun|ophthalm"
    "|audi|radi|h(?:a|ae)?emat|nephr|pulmon)ologist"
)
_HEALTH_WORDS = (
    r"diagnos(?:ed|is|es)|depressed|anxiety|ocd|hiv|sexually transmitted|ivf|fertility"
    r"|birth control"
    r"|on the pill|(?:sleeping|birth control) pills|hormones?|testosterone|o?estrogen"
    r"|mental (?:health|illness)|(?:my|his|her|sexual) health"
    r"|health (?:condition|issues?|problems?|insurance|records?|scare)|illness(?:es)?"
    r"|diseases?|disorders?|syndrome|chronic (?:pain|illness|fatigue|condition)"
    r"|blood (?:pressure|sugar|tests?|type|work)|heart (?:attack|condition|disease|surgery)"
    r"|(?:had|have) a stroke|sleep apno?ea|hearing aids?|bmi|(?:i|he|she) weighs?|meds"
    r"|prescription|prescribed|covid|flu|sick (?:leave|note|day)"
    r"|(?:i'm|i am|i've been|been) (?:sick|ill|unwell)|(?:my|the|a|his|her) doctor"
    r"|doctor'?s (?:appointment|note|visit)|gp appointment|check-?up|sober|relapsed?"
    r"|self[- ]harm|eating disorder|\d+(?:\.\d+)? ?(?:mg|mcg|µg|μg)"
    r"|panic attacks?|(?:expecting|having) (?:a baby|twins)|(?:maternity|paternity) leave"
    r"|nurse|emergency room|a&e|ambulance|broke my \w+|an x-?ray|mri|physio|burn-?out"
    r"|(?:mental|nervous) breakdown|fever|cough(?:ing)?|(?:hearing|vision) loss"
    r"|(?:am|is|are|i'm|went) (?:blind|deaf)"
)
_FINANCE = (
    r"salar(?:y|ies)|pay ?checks?|pay ?slips?|wages?|income|net worth|debts?|in debt|loans?"
    r"|mortgages?|overdraft|bankrupt(?:cy)?|alimony|credit (?:score|rating|report|history|limit)"
    r"|(?:bank|account|savings) balance|(?:my|our) savings|savings account|pension"
    r"|401\(?k\)?|retirement (?:fund|account|savings)|tax(?:es)?|tax (?:return|bill|refund)"
    r"|irs|hmrc|investments?|stock portfolio|(?:my|our) (?:stocks|shares|portfolio)"
    r"|an inheritance|inherited (?:money|a house|property|[$€£])|child support|(?:my|our) rent"
    r"|(?:i|we) owe|owed|finances"
    r"|financial|(?:life|car|home) insurance|(?:crypto|bitcoin) wallet"
    r"|my (?:\w+ )?(?:payments|bills)|behind on (?:\w+ ){0,2}(?:rent|payments|bills)"
    r"|our (?:car|rent|loan|mortgage|card|monthly|medical|utility) (?:payments|bills)"
    r"|laid off|unemploy\w{0,8}|(?:welfare|unemployment|disability|housing|child) benefits"
    r"|food stamps|payday loans?|paid off (?:my|our|the) (?:loan|mortgage|debt|car|card)"
    r"|(?:i'm|i am|we're|we are) broke|(?:my|our) bank"
    r"|(?:i|he|she) (?:earn|earns|make|makes|made|get paid|am paid|is paid)"
    r" (?:about |around |roughly |over |under )?[$€£¥]?\s?\d"
)

# (reason, pattern over the case-folded text)
_FOLDED_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (reason, re.compile(pattern))
    for reason, pattern in (
        (
            "payment card details",
            _words(
                r"card (?:number|no\.?|details|pin)|(?:credit|debit|bank|payment) cards?|cvv2?"
                r"|cvc2?|card security code|(?:my|card|bank|atm|debit|credit|sim|phone) pin"
                r"|pin (?:code|number)|(?:visa|mastercard|amex|american express)"
                r" (?:card|ending|number)"
            ),
        ),
        (
            "a bank account number",
            _words(
                r"iban|bic|swift code|routing (?:number|no\.?)|sort code"
                r"|bank (?:account|details|statement)|account (?:number|no\.?)"
            ),
        ),
        (
            "a national id number",
            _words(
                r"social security|ssn|national insurance|social insurance|national id(?:entity)?"
                r"|id card|identity (?:card|number|document)"
                r"|passport (?:number|no\.?|id|details|expir\w{0,8}|photo|scan)"
                r"|(?:my|his|her|their) passport|driv(?:er'?s?|ing) licen[cs]e"
                r"|tax (?:id|identification|number|code)|nhs number|medicare number|aadhaa?r"
                r"|personnummer|num[ée]ro de s[ée]curit[ée] sociale|sozialversicherungsnummer"
            ),
        ),
        (
            "a date of birth",
            _words(
                r"date of birth|d\.?o\.?b|birth ?date|birthdays?|born (?:on|in)"
                r"|(?:i am|i'm) \d{1,3} years? old"
            ),
        ),
        ("a phone number", _words(r"(?:phone|cell|mobile|telephone|landline) (?:number|no\.?)")),
        (
            "someone's contact details",
            "|".join(
                (
                    _words(r"contact (?:details|info|information|number)"),
                    rf"\b{_RELATION}(?:'s|s')? (?:\w+ ){{0,2}}{_CONTACT_THING}\b",
                    rf"\b{_CONTACT_THING} (?:number |address )?(?:of|for) (?:my|his|her) "
                    rf"{_RELATION}\b",
                    _words(r"(?:call|text|reach|email|e-mail) (?:me|him|her|them) (?:at|on)"),
                )
            ),
        ),
        (
            "where someone lives",
            _words(
                r"(?:i|we|he|she|they) (?:live|lives|living|reside|resides)"
                r" (?:in|at|on|near|close to|next to)"
                r"|(?:i'm|i am|we're|we are) (?:staying|living) (?:in|at)"
                r"|(?:my|our|his|her|their) (?:home |postal |mailing |street |new |old )?address"
                r"|(?:home|postal|mailing|street|shipping|billing|delivery|residential) address"
                r"|(?:zip|post|postal) ?code"
                r"|(?:my|our) (?:house|flat|apartment|home) is (?:at|in|on)"
                r"|(?:my|our|the) hotel room|my (?:current |exact )?location"
                r"|where i (?:am|live) right now"
            ),
        ),
        ("health information", f"{_stems(_HEALTH_STEMS)}|{_words(_HEALTH_WORDS)}"),
        ("financial information", _words(_FINANCE)),
        (
            "religious beliefs",
            _words(
                r"religio(?:n|ns|us)|christians?|catholics?|protestants?|evangelicals?|muslims?"
                r"|islam(?:ic)?|jewish|judaism|jews?|hindus?|hinduism|buddhis[mt]s?|sikhs?"
                r"|atheists?|agnostic|mormons?|jehovah'?s? witness(?:es)?|church|mosque"
                r"|synagogue|pray(?:s|ed|ing)?|prayers?|ramadan|halal|kosher|bible|qur'?an"
                r"|koran|torah"
            ),
        ),
        (
            "political opinions",
            _words(
                r"politics|political"
                r"|vot(?:e|ed|ing) (?:for|against|labour|tory|green|republican|democrat)"
                r"|democrats?|republicans?|labour party|tor(?:y|ies)|conservative party"
                r"|liberal democrats?|green party|party member(?:ship)?|member of the \w+ party"
                r"|socialists?|communists?|libertarians?|(?:left|right)-wing|trade unions?"
                r"|union member(?:ship)?|activists?"
            ),
        ),
        (
            "sexual orientation or gender identity",
            _words(
                r"gay|lesbian|bisexual|homosexual|heterosexual|queer|transgender"
                r"|trans (?:woman|man|person)|non-?binary|asexual|pansexual|lgbt\w{0,6}"
                r"|(?:came|coming|come) out (?:as|to)|not out (?:at|to)|sexual orientation"
                r"|sexuality|gender identity|sex life"
            ),
        ),
        (
            "a criminal record",
            _words(
                r"criminal record|convicted|convictions?|arrested|prison|in jail|jail time"
                r"|went to jail|probation|parole|dui|felony"
            ),
        ),
        (
            "personal circumstances",
            _words(
                r"divorc\w{0,6}|(?:we|i) (?:separated|split up)|custody|widow(?:ed|er)?"
                r"|(?:i|he|she) (?:was|got|am|is) (?:fired|sacked|dismissed)|disciplinary"
                r"|(?:sued|suing) (?:me|us|him|her)|(?:my|our) lawsuit|restraining order"
            ),
        ),
        (
            "ethnic origin or immigration status",
            _words(r"ethnicity|ethnic|immigration status|undocumented|asylum"),
        ),
        ("biometric data", _words(r"my fingerprints?|biometrics?|retina scan")),
    )
)

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
    re.compile(r"\b\w{2,40}(?:strasse|str\.|weg|gasse|platz|allee|laan|straat|gatan|vej) \d"),
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
    dashes or dots between them) that pass the Luhn check."""
    for match in _DIGIT_RUN.finditer(text):
        groups = _GROUP_SEPARATORS.split(match[0])
        for start in range(len(groups)):  # each inner loop stops after 19 digits: linear
            digits = ""
            for group in groups[start:]:
                digits += group
                if len(digits) > 19:
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
        _NORTH_AMERICAN_PHONE.search(text) is not None or _NATIONAL_PHONE.search(text) is not None
    )


def has_email(text: str) -> bool:
    """An e-mail address (``git@host:repo`` remotes aside)."""
    return any(match[1].casefold() not in _NOT_PERSONAL_EMAIL for match in _EMAIL.finditer(text))


def _has_address(text: str, folded: str) -> bool:
    return _ADDRESSES_AS_WRITTEN.search(text) is not None or any(
        pattern.search(folded) is not None for pattern in _ADDRESSES_FOLDED
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


def personal_data_reasons(text: str, folded: str | None = None) -> tuple[str, ...]:
    """Why ``text`` holds personal data or a sensitive category (empty: nothing found).

    ``folded`` is ``text.casefold()`` when the caller has it already."""
    folded = text.casefold() if folded is None else folded
    found = [reason for reason, check in _SHAPES if check(text, folded)]
    found.extend(reason for reason, pattern in _FOLDED_RULES if pattern.search(folded))
    return tuple(dict.fromkeys(found))
