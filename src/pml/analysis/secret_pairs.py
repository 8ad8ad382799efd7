"""A credential bound to its name by position: ``("X-Api-Key", "...")``, ``setattr(c,
"password", "...")``, ``environ.setdefault("DB_PASSWORD", "...")``.

``pair_contexts(node)`` maps the id of the second string of a pair to the first when the
first names a credential (see ``is_secret_keyword``): the pair is a two-element tuple or
list (a header list's entry, a key/value pair), or the last two positional arguments of a
call without keywords (``setattr``, ``setdefault``, ``putheader``, ``config.set``). A name
given by position says less than a keyword does, so the value must look like a credential
too, not like a label: one token (no space) of six characters or more, no placeholder, flag,
URN or identifier of letters, sharing no word with the name, with a digit, a sign or a
random look. A dict's ``"pass"`` key names a password too, and so does a call that signs
in (``login``, ``authenticate``, ``BasicAuth``, ``set_password``...): its last positional
string, after at least one other (``smtp.login("ada", "...")``, ``HTTPBasicAuth(u, "...")``).
``("password", "Password")``, ``("token", "token_type")``, ``("password", "Enter it")``
and a list of names (``["AuthReply", "AuthMethod2"]``) bind nothing.

Example::

    >>> import ast
    >>> pairs = ast.parse('("X-Api-Key", "Summer2025Pw")', mode="eval").body
    >>> list(pair_contexts(pairs).values())
    ['X-Api-Key']
    >>> pair_contexts(ast.parse('("password", "Password")', mode="eval").body)
    {}
"""

from __future__ import annotations

import ast
import re
from typing import Final

from pml.analysis.bindings import literal_str
from pml.analysis.credentials import is_secret_keyword, keyword_words, looks_random

SIGN_IN_PASSWORD: Final = "password"
# Calls whose last positional argument is a password (names lowercased, without ``_``).
_SIGN_IN: Final = frozenset(
    {"login", "authenticate", "auth", "basicauth", "httpbasicauth", "digestauth"}
    | {"httpdigestauth", "setpassword", "changepassword", "signin", "logon", "binds"}
)
_MIN_VALUE: Final = 6
_MAX_VALUE: Final = 4096
# An identifier-like label (``password_confirm``, ``X-Auth-Token``, ``api.key``).
_LABEL: Final = re.compile(r"[A-Za-z_][A-Za-z_.\-]*")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}:[A-Za-z/]")
_TEMPLATE: Final = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]{0,63}\}?|\{[^{}]{0,64}\}|%(?:\([^()]{0,64}\))?[a-z]|<[^<>]{0,64}>"
    r"|\*+|\[REDACTED\]"
)


def credential_like(name: str, value: str) -> bool:
    """Whether ``value``, given by position after ``name``, looks like a credential."""
    if not _MIN_VALUE <= len(value) <= _MAX_VALUE or any(char.isspace() for char in value):
        return False
    if value.startswith("-") or _SCHEME.match(value) is not None:  # a flag, a URN, a URL
        return False
    if _TEMPLATE.fullmatch(value) is not None or _LABEL.fullmatch(value) is not None:
        return False
    if not set(keyword_words(value)).isdisjoint(keyword_words(name)):  # a name of the kind
        return False
    return any(not char.isalpha() for char in value) or looks_random(value)


def _pair(elements: list[ast.expr]) -> tuple[ast.expr, ast.expr] | None:
    return (elements[-2], elements[-1]) if len(elements) >= 2 else None


def pair_contexts(node: ast.AST) -> dict[int, str]:
    """The id of ``node``'s string child given by position after a credential's name, mapped
    to that name (see the module doc)."""
    if isinstance(node, ast.Dict):
        return _pass_keys(node)
    if isinstance(node, ast.Tuple | ast.List) and len(node.elts) == 2:
        pair = _pair(node.elts)
    elif isinstance(node, ast.Call) and signs_in(node):
        return _sign_in_password(node)
    elif isinstance(node, ast.Call) and not node.keywords:
        pair = _pair(node.args)
    else:
        return {}
    if pair is None:
        return {}
    name, value = literal_str(pair[0]), literal_str(pair[1])
    if name is None or value is None or len(name) > 64 or not is_secret_keyword(name):
        return {}
    return {id(pair[1]): name} if credential_like(name, value) else {}


def _pass_keys(node: ast.Dict) -> dict[int, str]:
    """``{"user": "ada", "pass": "..."}``: ``pass`` alone is a password's key (a Python name
    cannot be ``pass``, so no binding elsewhere spells it)."""
    return {
        id(value): SIGN_IN_PASSWORD
        for key, value in zip(node.keys, node.values, strict=True)
        if key is not None
        and (name := literal_str(key)) is not None
        and keyword_words(name) == ["pass"]
        and (text := literal_str(value)) is not None
        and credential_like(SIGN_IN_PASSWORD, text)
    }


def signs_in(call: ast.Call) -> bool:
    """Whether a call signs in (``login``, ``authenticate``, ``BasicAuth``...)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name.lower().replace("_", "") in _SIGN_IN


def _sign_in_password(call: ast.Call) -> dict[int, str]:
    """The last positional string of a call that signs in, after at least one other."""
    if len(call.args) < 2 or (value := literal_str(call.args[-1])) is None:
        return {}
    return {id(call.args[-1]): SIGN_IN_PASSWORD} if credential_like(SIGN_IN_PASSWORD, value) else {}
