"""Credentials written in prose as a user and a password: comments, docstrings, notes.

``secret_text.secret_spans`` finds a password after its keyword (``password: …``,
``the password is …``). People also write the pair itself after a word for signing in, or
say whose password it is:

- ``login with ada / …``, ``creds ada/…``, ``credentials: ada:…``, ``sign in as
  ada@example.com/…``: a sign-in word, then on the same line ``user / password`` or
  ``user:password`` written tight (``endpoint: v2-auth`` is a label and its value); not a
  number alone, nor one with a colon (counts, ids and times);
- ``user: ada pass: …``, ``login ada, pass …``: the password after ``pass`` once the line
  named a user;
- ``password for ada is …``, ``the passcode of the vault was …``.

``prose_credential_spans(text)`` returns the password's spans. What follows must look like a
credential (``secret_pairs.credential_like``: six characters or more, a digit, a sign or a
random look, not a word, a path or a template), so ``log in at 10:30``, ``login page
/static/app.js`` and ``sign in as ada: see the wiki`` find nothing. Every pattern is bounded
and runs in linear time.

Example::

    >>> text = "# login with ada / Tr0ub4dor&3x if asked"
    >>> [text[a:b] for a, b in prose_credential_spans(text)]
    ['Tr0ub4dor&3x']
"""

from __future__ import annotations

import re
from typing import Final

from pml.analysis.secret_pairs import SIGN_IN_PASSWORD, credential_like

_SIGN_IN: Final = r"(?:log[ \t-]?in|log[ \t-]?on|sign[ \t-]?in|creds?|credentials?)"
_VALUE: Final = r"['\"]?([^\s'\"]{6,128})"
# A sign-in word, a few words, then ``user / password`` or ``user:password``.
_PAIR: Final = re.compile(
    rf"(?i:(?<![a-z0-9_]){_SIGN_IN}(?![a-z0-9_]))[^\n]{{0,40}}?"
    r"(?<![^\s'\"(,])[^\s/:'\"(,]{1,64}(?:[ \t]{0,2}/[ \t]{0,2}|:)" + _VALUE
)
# ``user: ada pass: …``: ``pass`` once the line has named a user.
_USER_THEN_PASS: Final = re.compile(
    rf"(?i:(?<![a-z0-9_])(?:user(?:[ \t_-]?name)?|{_SIGN_IN})(?![a-z0-9_]))[^\n]{{0,64}}?"
    r"(?i:(?<![a-z0-9_])pass(?![a-z0-9_]))(?:[ \t]{0,2}[:=][ \t]{0,4}|[ \t]{1,4})" + _VALUE
)
# ``password for ada is …``: whose password, then the password.
_WHOSE: Final = re.compile(
    r"(?i:(?<![a-z0-9_])(?:password|passwd|pwd|passcode|passphrase)[ \t]{1,4}(?:for|of)"
    r"[ \t]{1,4}(?:the[ \t]{1,4})?[^\s]{1,64}"
    r"(?:[ \t]{1,4}(?:is|was)[ \t]{1,4}|[ \t]{0,2}[:=][ \t]{0,4}))" + _VALUE
)
_TRAILING: Final = ".,;:)'\""  # a password may end with ``!`` or ``?``: they stay


def prose_credential_spans(text: str) -> list[tuple[int, int]]:
    """The spans of the passwords written as a pair or said whose (see the module)."""
    spans: list[tuple[int, int]] = []
    for pattern in (_PAIR, _USER_THEN_PASS, _WHOSE):
        for match in pattern.finditer(text):
            value = match[1].rstrip(_TRAILING)
            if "/" in value or not credential_like(SIGN_IN_PASSWORD, value):
                continue  # a path, a word, a template: not a password
            if pattern is _PAIR and (":" in value or value.isdigit()):
                continue  # a time (``10:30:00Z``), an id or a count (``count: 123456``)
            spans.append((match.start(1), match.start(1) + len(value)))
    return spans


__all__ = ["prose_credential_spans"]
