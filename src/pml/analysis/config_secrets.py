"""Passwords written in credential files' own formats, which carry no ``password=`` keyword.

``config_file_spans(text)`` finds the password of a ``.pgpass`` line
(``host:port:database:user:password``, the port a number or ``*``), of a ``.netrc`` entry
(``machine host login user password secret``, ``default login user password secret``) and
of an Oracle connect string (``user/password@host:1521/service``), in any text: a string
constant, a comment, an intent, an audit event. A field a template fills in
(``${PGPASSWORD}``, ``{password}``, ``%s``), a placeholder word and the format's own
documentation (``hostname:port:database:username:password``: no port number) are no
credential.

Every pattern starts behind a look-behind and bounds its runs: linear on hostile input.

Example::

    >>> text = "echo 'db.example.com:5432:app:ada:Summer2025' >> ~/.pgpass"
    >>> [text[a:b] for a, b in config_file_spans(text)]
    ['Summer2025']
    >>> text = "machine api.example.com login ada password correcthorsebattery"
    >>> [text[a:b] for a, b in config_file_spans(text)]
    ['correcthorsebattery']
    >>> config_file_spans("hostname:port:database:username:password")
    []
"""

from __future__ import annotations

import re
from typing import Final

# host:port:database:user:password; a field may hold ``\\:`` (an escaped colon).
_FIELD = r"(?:[^\s:'\"\\]|\\.){1,128}"
_PGPASS: Final = re.compile(
    r"(?<![^\s'\"#`=(\[])"  # the start of the text, of a line, a word or a quoted string
    r"([A-Za-z0-9*][A-Za-z0-9.\-_*]{0,252})"  # host
    r":(?:[0-9]{1,5}|\*):" + _FIELD + ":" + _FIELD + r":((?:[^\s:'\"\\]|\\.){4,256})"
    r"(?![^\s'\"`)\]])"
)
_SPACE = r"[ \t\r\n]{1,16}"
_NETRC: Final = re.compile(
    rf"(?<![A-Za-z0-9_])(?:machine{_SPACE}[^\s]{{1,253}}|default)"
    rf"(?:{_SPACE}(?:login|account){_SPACE}[^\s]{{1,256}})?"
    rf"{_SPACE}password{_SPACE}([^\s]{{1,256}})"
)
# Oracle's EZConnect ``user/password@host:port/service`` (a port or a service required:
# ``images/icon@2x.png`` and ``pkg/name@1.2.3`` are no connect strings).
_EZCONNECT: Final = re.compile(
    r"(?<![A-Za-z0-9_$#/.@:\-])[A-Za-z][A-Za-z0-9_$#]{0,127}/([^\s/@'\"]{1,128})"
    r"@(?://)?[A-Za-z0-9][A-Za-z0-9.\-]{0,252}(?::[0-9]{1,5}(?:/[A-Za-z0-9_.$]{1,64})?"
    r"|/[A-Za-z][A-Za-z0-9_.$]{0,63})(?![A-Za-z0-9_.$/:@])"
)
_TEMPLATE: Final = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]{0,63}\}?|\{[^{}]{0,64}\}|%(?:\([^()]{0,64}\))?[a-z]|<[^<>]{0,64}>"
)
_PLACEHOLDERS: Final = frozenset(
    {"password", "passwd", "pass", "pwd", "secret", "xxx", "***", "changeme"}
)


def _is_credential(value: str) -> bool:
    """A value a credential file would hold, not a template field or a placeholder word."""
    text = value.strip("'\"`")
    return (
        bool(text)
        and any(char.isalnum() for char in text)
        and text.lower() not in _PLACEHOLDERS
        and _TEMPLATE.fullmatch(text) is None
        and not text.startswith("[REDACTED")
    )


def config_file_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of ``.pgpass``, ``.netrc`` and EZConnect passwords."""
    spans: list[tuple[int, int]] = []
    for match in _PGPASS.finditer(text):
        host = match[1]
        # A host names something: ``*``, or letters (``12:30:45:...`` is a time, not a host).
        if (host == "*" or any(char.isalpha() for char in host)) and _is_credential(match[2]):
            spans.append(match.span(2))
    spans.extend(m.span(1) for m in _NETRC.finditer(text) if _is_credential(m[1]))
    spans.extend(m.span(1) for m in _EZCONNECT.finditer(text) if _is_credential(m[1]))
    return spans
