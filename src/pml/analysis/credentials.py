"""Telling credentials from ordinary literals, so that secrets are never stored (SPEC §6).

Every pattern here runs in linear time on hostile input (no unbounded run before a required
suffix without a lookbehind anchoring it), since values come from untrusted code.

``looks_secret(keyword, value)`` flags a string when its keyword names a credential
(``token``, ``api_key``, ``clientSecret``, ``X-Auth-Token``...), when its text has the shape
of a known credential (``sk-...``, ``ghp_...``, ``AKIA...``, a JWT, ``Bearer ...``, a PEM
private key, a URL with a password), or when it is a long, random-looking token. Lists and
dicts are searched: a dict's keys serve as keywords for their values, and are judged as
values themselves (``{"ghp_...": 1}``).

Example::

    >>> looks_secret("github_token", "abc123")
    True
    >>> looks_secret("tokenizer_path", "/models/tok.json")
    False
    >>> looks_secret("headers", {"Authorization": "Bearer 3f9a1c7e5b2d8f40a6c1"})
    True
    >>> looks_secret("path", "/home/ada/reports/2024-06-01/summary.json")
    False
    >>> looks_secret("value", "q8Zt1LmX4vR7yN2kP9sJ3wB6")
    True
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections import Counter
from typing import cast

from pml.analysis.token_shapes import CREDENTIAL_SHAPES, command_line_spans

__all__ = [
    "CREDENTIAL_SHAPES",
    "flag_spans",
    "is_secret_keyword",
    "keyword_words",
    "looks_random",
    "looks_secret",
    "secret_base",
]

# Words that name a credential when they appear in a keyword (split on case and punctuation).
_SECRET_WORDS = frozenset(
    {
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "pw",
        "pswd",
        "apikey",
        "accesskey",
        "privatekey",
        "secretkey",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "creds",
        "bearer",
        "passcode",
        "passkey",
        "sessionid",
        "accountkey",
        "mnemonic",
    }
)
# The same words in other languages, as ``keyword_words`` spells them (accents dropped).
_FOREIGN_SECRET_WORDS = (
    "passwort kennwort geheimnis zugangsdaten motdepasse contrasena contrasenas secreto senha"
    " segredo segreto wachtwoord geheim haslo losenord passord adgangskode salasana jelszo"
    " heslo sifre пароль пароли токен секрет"
)
# Scripts written without spaces between words: a credential named anywhere in the word.
_SECRET_INFIXES = "密码 密碼 口令 令牌 密钥 秘钥 パスワード 暗証番号 トークン 비밀번호 암호 토큰"
# One word that ends with these names a credential too: ``PGPASSWORD``, ``clientsecret``.
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret")
# ``<first>_key`` pairs that name a credential: ``api_key``, ``accessKey``, ``private-key``.
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "private", "secret", "signing", "encryption", "decryption", "master"}
    | {"app", "consumer", "hmac", "license", "client", "shared", "account", "storage"}
    | {"subscription", "webhook", "deploy", "session", "admin", "service", "root", "aes"}
)
# A trailing word that makes the keyword describe a credential, not hold one: ``token_type``,
# ``password_file``, ``auth_method``, ``token_limit``.
_DESCRIPTOR_WORDS = frozenset(
    {
        "type",
        "kind",
        "name",
        "names",
        "id",
        "ids",
        "path",
        "file",
        "filename",
        "dir",
        "url",
        "uri",
        "endpoint",
        "host",
        "header",
        "hdr",
        "count",
        "length",
        "len",
        "limit",
        "size",
        "max",
        "min",
        "method",
        "mode",
        "scheme",
        "provider",
        "field",
        "env",
        "var",
        "format",
        "prefix",
        "user",
        "username",
        "email",
        "required",
        "enabled",
        "ttl",
        "timeout",
        "expiry",
        "expires",
        "state",
        "status",
        "level",
        "hash",
        "hashed",
        "salt",
        "policy",
        "reset",
        "hint",
        "strength",
        "seen",
        "changed",
    }
)
# Values that fill a credential-named field without being a credential.
_PLACEHOLDER_VALUES = frozenset(
    {"", "none", "null", "true", "false", "basic", "bearer", "digest", "oauth", "oauth2", "ntlm"}
    | {"negotiate", "jwt", "token", "apikey", "api_key", "api-key", "xxx", "***", "redacted"}
    | {"[redacted]"}  # what redaction leaves
    | {"yes", "no", "on", "off", "enabled", "disabled", "required", "optional"}
)
# ``${VAR}``, ``$VAR``, ``<token>``, ``{{ token }}``, ``{token}``, ``%s``, ``%(token)s``.
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\{\{[^{}]*\}\}|\{[^{}]*\}|%(?:\([^()]*\))?[a-z]"
    r"|:[A-Za-z_][A-Za-z0-9_]*"  # a SQL bind parameter
)

_VALUE_PATTERNS = re.compile(
    "|".join(
        [
            CREDENTIAL_SHAPES.pattern,
            r"(?i:\bbearer\s+[A-Za-z0-9\-._~+/]{12,}=*)",
            r"(?i:^\s*basic\s+[A-Za-z0-9+/]{8,}={0,2}\s*$)",
            r"-----BEGIN[A-Z ]*PRIVATE KEY-----",
            # user:password@ (not a template's ``{password}`` or ``${PASSWORD}``)
            r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:(?![{$%])[^/\s@]+@",
        ]
    )
)
# ``password=...`` inside connection strings and query strings.
_ASSIGNMENTS = re.compile(r"(?:^|[;&?\s])([A-Za-z][A-Za-z0-9_\-]*)=([^\s;&#]+)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # zero-width: linear
_LATIN_ACCENTS = re.compile("[\u0300-\u036f]")  # not a kana's voicing mark: ``パ`` stays
_NON_ALNUM = re.compile(r"[\W_]+")  # any script's letters and digits stay in words
# Also with a short lowercase prefix (``wf_<hex>``, ``req_<uuid>``): ids, not secrets.
_HEX_OR_UUID = re.compile(
    r"(?:[a-z]{1,8}_){0,3}(?:[0-9a-fA-F]+|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})"
    r"|[+-]?0[xX][0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?(?:[pP][+-]?[0-9]+)?"  # hex ints and floats
)
_PATH_SEPARATORS = re.compile(r"[/\\?&=#:;@]")
_WORDS = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{4,}|[0-9]{4,}")
_PATH_LIKE = re.compile(r"^(?:[/~.]|[A-Za-z]:[\\/])|^[A-Za-z][A-Za-z0-9+.\-]*://|\.[A-Za-z]{1,5}$")

# ``--password hunter2``, ``--api-key=...``: a command-line flag that names a credential
# (``-x1 --token ...``: the next flag is never the value of the one before).
_FLAG = re.compile(
    r"(?<![A-Za-z0-9_\-])--?([A-Za-z][A-Za-z0-9\-]{1,40})(?:=|[ \t]{1,4})['\"]?"
    r"(?!-)([^\s'\"]{4,256})"  # a value, not the next flag
)


_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?:=.*)?")


def keyword_words(keyword: str) -> list[str]:
    """Lowercase words of a snake, camel, kebab or dotted name: ``xApiKey`` -> x, api, key."""
    split = _CAMEL.sub("_", keyword)
    if split.isascii():
        return [word for word in _NON_ALNUM.split(split.lower()) if word]
    # ``contraseña`` → contrasena, ``Paßwort`` → passwort, ``пароль`` stays itself.
    bare = _LATIN_ACCENTS.sub("", unicodedata.normalize("NFKD", split.casefold()))
    return [word for word in _NON_ALNUM.split(unicodedata.normalize("NFC", bare)) if word]


def _folded_words(text: str) -> frozenset[str]:
    return frozenset(word for spelled in text.split() for word in keyword_words(spelled))


def is_secret_keyword(keyword: str) -> bool:
    """Whether a keyword names a credential (``api_key``), not something about one."""
    words = keyword_words(keyword)
    if "public" in words:  # ``public_key``, ``publicKeyToken``: published, not secret
        return False
    for index, spelled in enumerate(words):
        word = spelled.rstrip("0123456789") or spelled  # ``Password1``, ``password2``
        named = (
            word in _SECRET_WORDS
            or word in _FOREIGN_WORDS
            or (not word.isascii() and any(infix in word for infix in _FOREIGN_INFIXES))
            or (word == "passe" and words[index - 2 : index] == ["mot", "de"])
            or (word == "key" and index > 0 and words[index - 1] in _KEY_QUALIFIERS)
            or (word == "pass" and index > 0)  # ``db_pass``, not a ``pass`` of a loop
            or (len(word) > 6 and word.endswith(_SECRET_ENDINGS))
        )
        if named:
            return not any(later in _DESCRIPTOR_WORDS for later in words[index + 1 :])
    return False


_FOREIGN_WORDS = _folded_words(_FOREIGN_SECRET_WORDS)
_FOREIGN_INFIXES = tuple(_folded_words(_SECRET_INFIXES))


def secret_base(context: str) -> str:
    """The parameter name for a secret bound to ``context`` (``apiKey`` → ``api_key``);
    ``secret`` when there is none, or when the context looks like a credential itself (a dict
    key such as ``"ghp_..."``)."""
    if looks_secret("", context):
        return "secret"
    return "_".join(keyword_words(context)) or "secret"


def _is_placeholder(value: str) -> bool:
    text = value.strip()
    return text.lower() in _PLACEHOLDER_VALUES or _PLACEHOLDER.fullmatch(text) is not None


def _named_value_is_secret(value: str) -> bool:
    """A value under a credential keyword: anything real (short numbers, OIDs and blanks
    aside; a PIN-like run of six digits or more counts)."""
    real = any(char.isalpha() for char in value) or (value.isdigit() and len(value) >= 6)
    return real and not _is_placeholder(value)


def _assignment_is_secret(keyword: str, value: str) -> bool:
    """``password=...`` inside text: a credential keyword (not bare ``auth``), a real value."""
    value = value.rstrip(".,;:)'\"").lstrip("'\"")
    words = keyword_words(keyword)
    if words == ["auth"] or len(value) < 6 or (words[-1:] == ["pw"] and value.isalpha()):
        return False  # ``pw=channel``: a two-letter name says too little for a word
    return is_secret_keyword(keyword) and _named_value_is_secret(value)


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text`` (0.0 for the empty string)."""
    if not text:
        return 0.0
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in Counter(text).values())


def _class_changes(text: str) -> float:
    """Share of neighbouring characters of different kinds (lower, upper, digit, other)."""

    def kind(char: str) -> int:
        return 0 if char.islower() else 1 if char.isupper() else 2 if char.isdigit() else 3

    kinds = [kind(char) for char in text]
    changes = sum(1 for a, b in itertools.pairwise(kinds) if a != b)
    return changes / (len(text) - 1)


def _wordiness(text: str) -> float:
    """Share of characters in word-like runs (``Report``, ``ACME``, ``2024``)."""
    return sum(len(run) for run in _WORDS.findall(text)) / len(text)


def _token_looks_random(text: str) -> bool:
    """A long token of mixed letters and digits, with high entropy and no word structure."""
    if not 20 <= len(text) <= 256 or any(char.isspace() for char in text):
        return False
    if not any(char.isalpha() for char in text):
        return False
    if not any(char.isdigit() for char in text):
        return False
    if _HEX_OR_UUID.fullmatch(text) is not None:  # checksums, commit ids, UUIDs
        return False
    punctuation = sum(1 for char in text.rstrip("=") if not char.isalnum())
    if punctuation > len(text) // 10:  # identifiers, versions, dates: random tokens have few
        return False
    threshold = min(4.0, math.log2(len(text)) - 0.75)
    return (
        shannon_entropy(text) >= threshold
        and _class_changes(text) >= 0.3
        and _wordiness(text) < 0.6
        and max(len(run) for run in [*_WORDS.findall(text), ""]) < 10  # no long word
    )


def looks_random(text: str) -> bool:
    """High-entropy check; paths and URLs are judged part by part."""
    if _PATH_LIKE.search(text) is not None:
        return any(_token_looks_random(part) for part in _PATH_SEPARATORS.split(text))
    return _token_looks_random(text)


def _string_looks_secret(value: str, named: bool) -> bool:
    if _VALUE_PATTERNS.search(value) is not None:
        return True
    if named and _named_value_is_secret(value):
        return True
    if any(_assignment_is_secret(m[1], m[2]) for m in _ASSIGNMENTS.finditer(value)):
        return True
    if flag_spans(value) or command_line_spans(value):
        return True
    return looks_random(value)


def flag_spans(text: str) -> list[tuple[int, int]]:
    """The values of command-line flags that name a credential (``--password hunter22``)."""
    spans: list[tuple[int, int]] = []
    for match in _FLAG.finditer(text):
        value = match[2].rstrip(".,;:)`")
        if keyword_words(match[1]) == ["auth"] or not is_secret_keyword(match[1]):
            continue
        if value[:1] in "$%{<-[" or _is_placeholder(value) or len(value) < 4:
            continue
        if _ENV_NAME.fullmatch(value) or (value.isalpha() and len(value) < 12):
            continue  # ``--secrets HF_TOKEN`` names a variable; ``--password options`` is prose
        spans.append((match.start(2), match.start(2) + len(value)))
    return spans


def looks_secret(keyword: str, value: object) -> bool:
    """Whether ``value`` (passed as ``keyword``) looks like a credential; see the module doc."""
    # Iterative: a deeply nested value must not overflow the stack.
    stack: list[tuple[str, object, bool]] = [(keyword, value, False)]
    while stack:
        key, item, inherited = stack.pop()
        named = inherited or is_secret_keyword(key)
        if isinstance(item, str):
            if _string_looks_secret(item, named):
                return True
        elif isinstance(item, dict):
            for child_key, child in cast("dict[object, object]", item).items():
                stack.append((str(child_key), child, named))
                if isinstance(child_key, str):  # a key can be a credential too
                    stack.append(("", child_key, False))
        elif isinstance(item, list | tuple):
            stack.extend((key, child, named) for child in cast("list[object]", item))
    return False
