"""Secrets written as sentences: the credentials that no token shape finds.

    >>> secret_prose_reasons("my password is hunter2")
    ['a password']
    >>> secret_prose_reasons("the code for the side door is 2255")
    ['an access code (door, alarm, safe, keypad)']
    >>> secret_prose_reasons("rotate the api key monthly")
    []

``folded`` is the case-folded text (``pml.memory.sensitivity`` normalises and bounds it);
accents are removed here, so ``contraseña`` reads ``contrasena``. What is found:

- a secret's name, then the value: ``my password is X``, ``the api key for staging: X``,
  ``PIN 4821``, ``mot de passe du wifi : X``, ``el PIN de mi tarjeta es 5590``,
  ``the wifi key is 'correct horse battery staple'``, ``my password, it's X``;
- access codes: a door, gate, alarm, safe, keypad or lockbox with a code, combo or
  combination and a value with three digits or more (``gate code 3321``, ``the code for
  the side door is 2255``, ``Der Türcode ist 4711``);
- a seed phrase: ``seed:``, ``mnemonic``, ``the 12 words are`` and six or more short words;
- login pairs (``login: alice / password: X``, ``the admin login is root, password
  toor``, ``user ben pass Orange77``: after "pass" the value must mix letters with digits
  or symbols), passwords on a command line (``mysql -pX``), and passwords in CJK scripts;
- shapes that are secrets whole: PEM and PGP private key blocks, PuTTY key files, Slack,
  Discord, Office and Zapier webhook URLs.

A value must look like one: ``the password is stored in vault``, ``passwords are hashed``,
``the api key is ${API_KEY}``, ``the password field`` name no secret. Every pattern is
linear: bounded repetitions, values checked by lookahead so no name hides another.
"""

from __future__ import annotations

import re
from typing import Final

from pml.memory.personal_data import plain

_PASSWORD_WORDS = (
    r"passwords?|passwd|passcodes?|passphrases?|pass phrase|pwd|pw|mot de passe|mdp"
    r"|contrasenas?|clave|senha|wachtwoord|passwort|kennwort|пароль"
    r"|(?:wi-?fi|wlan|wpa2?|router|hotspot) (?:key|code|pass)"
)
_KEY_WORDS = (
    r"api[ _-]?keys?|access[ _-]?keys?|secret[ _-]?keys?|private[ _-]?keys?"
    r"|client[ _-]?secrets?|(?:aws )?secret access keys?|shared secrets?|secrets?"
    r"|(?:access |auth |api |bearer |refresh )?tokens?"
    r"|(?:totp|otp|2fa|mfa|hmac|signing|encryption|master|unseal|licen[cs]e|session|jwt"
    r"|consumer|oauth) (?:secret|seed|key)s?"
)
_PHRASE_WORDS = (
    r"recovery (?:codes?|phrase|key)|backup (?:codes?|keys?)|seed phrase|mnemonic|2fa codes?"
    r"|one-time codes?"
)
_PIN_WORDS = (
    r"pin(?: code| number)?|cvv2?|cvc2?|(?:card )?security code"
    r"|(?:door|gate|alarm|safe|garage|lock|entry|access|building|locker|keypad) code"
)
_LINK_WORDS = r"is|are|was|were|est|es|ist|sind|son|era|lautet|heisst|war|reads"
_VIA_WORDS = r"for|of|to|on|at|de|du|del|des|pour|para|fur|zum|zur|vom|von|der"
_SECRET_PHRASE = re.compile(
    rf"\b(?=\w)(?:(?P<password>{_PASSWORD_WORDS})|(?P<key>{_KEY_WORDS})|(?P<phrase>{_PHRASE_WORDS})"
    rf"|(?P<pin>{_PIN_WORDS}))\b"
    rf"(?P<via> (?:{_VIA_WORDS})(?: (?!(?:{_LINK_WORDS})\b)[^\s:=]{{1,40}}){{1,4}})?"
    rf"(?:(?P<link>'s| {{0,3}}(?:(?:{_LINK_WORDS})\b|[:=]|->|=>)"
    r"| {0,2}[?,\u2014-]? {0,2}(?:it's|it is|c'est)\b))? {0,3}"
    r"(?=[\"'«“]?(?P<value>[^\s\"'»”]{1,200}))"
)

_ACCESS_THINGS = (
    r"doors?|gates?|alarms?|safe|garage|locks?|lockbox|lock box|key ?safe|padlock|keypad"
    r"|entry|entrance|building|locker|intercom|buzzer|disarm|porte|portail|digicode|puerta"
    r"|portal|alarma|tur|tor|tresor"
)
_CODE_WORDS = r"codes?|combo|combination|pin|passcode|keycode|codigo|combinaison|combinacion"
_ACCESS_CODE = re.compile(
    rf"(?=[a-z])(?:\b(?:{_ACCESS_THINGS})(?:[ \-]\w{{1,20}}){{0,2}}?[ \-](?:{_CODE_WORDS})\b"
    rf"|\b(?:{_CODE_WORDS}) (?:{_VIA_WORDS})(?: [\w']{{1,20}}){{0,3}}?[ '](?:{_ACCESS_THINGS})\b"
    rf"(?:[ '\-]\w{{1,20}}){{0,2}}?"
    r"|\b(?:tur|tor|alarm|zugangs|tresor|haustur|eingangs|garagen|digi)code\b)"
    r"(?: (?:for|of|to|on|at)(?: [\w'\-]{1,20}){1,3}?)?[ :=?\-]{0,4}"
    rf"(?:(?:{_LINK_WORDS})[ :]{{1,3}})?"
    r"(?P<code>[a-z]?\d(?:[\-. ]?\d|[a-z]){2,11})(?![\w\-])"
)
_SEED_PHRASE = re.compile(
    r"\b(?:seed|mnemonic|(?:seed|recovery|backup|secret) (?:phrase|sentence|words)"
    r"|(?:12|15|18|24|twelve|fifteen|eighteen|twenty-four) words)"
    r"(?: (?:is|are)(?: ?:)? ?| ?[:=] ?)(?P<words>(?:[a-z]{3,8},? ){5,23}[a-z]{3,8})\b"
)
_CJK_PASSWORD = re.compile(
    r"(?:密码|密碼|パスワード|비밀번호|暗証番号)\s{0,3}(?:是|は|:|는|은|=|为|為)?\s{0,3}"
    r"(?P<value>[^\s。、,]{3,64})"
)
# Passwords given on a command line, and "login user / password" pairs.
_COMMAND_PASSWORD = re.compile(
    r"\b(?:mysql|mysqldump|mariadb|sshpass)\b[^\n]{0,120}? -p(?P<value>[^\s\-]\S{2,})"
)
_LOGIN_PAIR = re.compile(
    r"\b(?:login|logins|log-in|credentials?|creds)\b(?: (?:is|are|was|=|:))? {0,3}"
    r"[^\s/:]{1,64} ?[/:] ?(?P<value>\S{3,64})"
)
_USER_THEN_PASSWORD = re.compile(
    r"\b(?:user(?:name)?|login|account|e-?mail|benutzer(?:name)?|utilisateur|usuario"
    r"|identifiant)\b(?: (?:is|es|est|ist))?[ :=]{0,3}[^\s,;/]{1,64}(?: [^\s,;/]{1,64})?"
    r"[ ,;/]{1,3}(?:and |et |y |und )?(?:(?:the|my|le|la|el|das) )?"
    r"(?:(?P<word>password|passwd|pw|pwd|mdp|mot de passe|contrasena|passwort|kennwort|clave)"
    r"|pass)\b(?: (?:is|es|est|ist))?[ :=]{0,3}(?P<value>[^\s,;]{3,64})"
)
# Keys and webhooks whose shape is the secret: PEM and PuTTY private keys, webhook URLs.
_SECRET_SHAPES = re.compile(
    r"-----begin [a-z0-9 ]{0,40}private key(?: block)?-----"
    r"|putty-user-key-file-\d{1,2}:[^\n]{0,200}\n(?:[^\n]{0,200}\n){0,3}private-lines:"
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/[\w/]{20,}"
    r"|discord(?:app)?\.com/api/webhooks/\d{5,}/[\w\-]{20,}"
    r"|\.webhook\.office\.com/webhookb2/\S{20,}|hooks\.zapier\.com/hooks/catch/\d+/\w+"
)
_ORDINARY_WORDS = (
    "the a an in on at to for of from with by not no never none null stored saved kept written "
    "required optional needed same different set unset reset changed rotated managed shared "
    "hidden encrypted hashed salted generated random secure insecure strong weak long short too "
    "very empty blank missing wrong invalid valid sensitive case-sensitive case somewhere there "
    "here it it's its this that these those what which who my your his her their our now still "
    "also always usually sometimes only just being been be located inside under out and or but "
    "if when where how why something anything nothing whatever 1password lastpass bitwarden "
    "keepass vault keychain redacted unknown available protected mandatory per every each one "
    "two three all any some new old default configured defined provided given sent used "
    "[redacted] *** xxx ... placeholder example field fields manager policy policies flow hash "
    "change changes rotation strength length expiry prompt form input box page screen dialog "
    "rules requirements hint storage store login auth recovery entry complexity history update "
    "validation check checks salt file files list generator based column table reuse expiration "
    "toggle visibility confirmation again twice once later first please "
    "dans sur pas requis obligatoire stocke stockee chiffre enregistre ici la le les un une "
    "esta guardada guardado almacenada cifrada obligatorio aqui el los las una "
    "gespeichert verschlusselt nicht erforderlich im kein keine geheim hier die der das ein eine"
)
_NOT_A_VALUE = frozenset(_ORDINARY_WORDS.split())
_PLACEHOLDER = re.compile(r"\$\{?[a-z_][a-z0-9_]*\}?|<[^<>]*>|\{\{[^{}]*\}\}|\*+|x{3,}|\.{3,}")
_WORD_FORM = re.compile(r"[a-z]{4,}(?:ed|ing)|[a-z]{3,}(?:ado|ada|ido|ida)|ge[a-z]{3,}t")
_STOPWORDS = frozenset(
    {"the", "and", "is", "are", "to", "of", "for", "with", "in", "on", "a", "it", "that"}
)
PASSWORD: Final = "a password"
_PHRASE_REASONS: Final = {
    "password": PASSWORD,
    "key": "a secret key or token",
    "phrase": "a recovery phrase or backup codes",
    "pin": "a PIN or card security code",
}
_ACCESS_REASON: Final = "an access code (door, alarm, safe, keypad)"
_SHAPE_REASON: Final = "a private key or a webhook URL"


def secret_prose_reasons(folded: str) -> list[str]:
    """Why ``folded`` (case-folded text) holds a secret written as a sentence (see module)."""
    words = plain(folded)
    reasons: list[str] = []
    for match in _SECRET_PHRASE.finditer(words):
        kind = next(kind for kind in _PHRASE_REASONS if match[kind] is not None)
        if _phrase_value_is_secret(match, kind):
            reasons.append(_PHRASE_REASONS[kind])
    if any(_is_code(m["code"]) for m in _ACCESS_CODE.finditer(words)):
        reasons.append(_ACCESS_REASON)
    if any(_is_seed(m["words"]) for m in _SEED_PHRASE.finditer(words)):
        reasons.append(_PHRASE_REASONS["phrase"])
    if any(value_is_real(m["value"]) for m in _CJK_PASSWORD.finditer(folded)):
        reasons.append(PASSWORD)
    if (
        _COMMAND_PASSWORD.search(words) is not None
        or any(_mixed(m["value"]) for m in _LOGIN_PAIR.finditer(words))
        or any(_paired_value(m) for m in _USER_THEN_PASSWORD.finditer(words))
    ):
        reasons.append(PASSWORD)
    if _SECRET_SHAPES.search(words) is not None:
        reasons.append(_SHAPE_REASON)
    return list(dict.fromkeys(reasons))


def value_is_real(value: str) -> bool:
    """Whether a value after a secret's name is one, not a word of an ordinary sentence."""
    value = value.rstrip(".,;)!?")
    if len(value) < 3 or value in _NOT_A_VALUE or _PLACEHOLDER.fullmatch(value):
        return False
    return _WORD_FORM.fullmatch(value) is None  # "is hashed", "is expiring", "guardada"


def _mixed(value: str) -> bool:
    """Letters with a digit or a symbol: how a password looks, unlike a word or a path."""
    value = value.rstrip(".,;)")
    return (
        value_is_real(value)
        and any(char.isalpha() for char in value)
        and any(char.isdigit() or not char.isalnum() for char in value)
        and not value.startswith(("/", "http", "~", "."))
    )


def _paired_value(match: re.Match[str]) -> bool:
    """After a user name: any real value for "password", a password-like one for "pass"."""
    return (value_is_real if match["word"] else _mixed)(match["value"])


def _is_code(code: str) -> bool:
    digits = sum(char.isdigit() for char in code)
    return (
        digits >= 3 and len(code.replace("-", "").replace(".", "").replace(" ", "")) - digits <= 2
    )


def _is_seed(run: str) -> bool:
    """Six or more words that read as a word list, not as a sentence."""
    seed_words = run.replace(",", " ").split()
    return len(seed_words) >= 6 and sum(word in _STOPWORDS for word in seed_words) <= 1


def _phrase_value_is_secret(match: re.Match[str], kind: str) -> bool:
    value = match["value"].rstrip(".,;)!?")
    linked = match["link"] is not None
    if match["via"] is not None and not linked:
        return False
    digits = sum(char.isdigit() for char in value)
    if kind == "pin":
        return value.isascii() and value.isdigit() and 3 <= len(value) <= 8
    if not value_is_real(value):
        return False
    if kind == "password":
        return linked or (digits > 0 and (len(value) >= 4 or any(c.isalpha() for c in value)))
    if kind == "key":
        return (linked or digits > 0) and (digits > 0 or len(value) >= 24)
    return linked or digits >= 3  # a recovery phrase's first word, or backup codes
