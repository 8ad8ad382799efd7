"""Fully qualified capability names: ``<org>.<project>.<namespace>.<action>.<hash>``.

An FQDN is a capability's immutable identity (SPEC §6.1). ``hash`` is the first 4 hex
characters of the code hash, longer only when 4 would collide; :func:`fqdn_candidates`
yields the candidates in that order and the caller keeps the first one not in use.

Example::

    >>> fqdn = Fqdn.parse("local.default.fs.read_json.a7f3")
    >>> fqdn.namespace, fqdn.action, str(fqdn)
    ('fs', 'read_json', 'local.default.fs.read_json.a7f3')
    >>> [str(f) for f in fqdn_candidates("local", "default", "fs", "read", "a7f3b2")]
    ['local.default.fs.read.a7f3', 'local.default.fs.read.a7f3b', 'local.default.fs.read.a7f3b2']

Patterns are used with ``fullmatch`` (so a trailing newline never passes ``$``); they keep
``^...$`` so that they can also be given to JSON Schema and other regex engines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from pml.errors import InvalidFqdn

FQDN_COMPONENT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HASH_COMPONENT = re.compile(r"^[0-9a-f]{4,64}$")

MIN_HASH_LENGTH = 4
MESSAGE_VALUE_LIMIT = 100
_EXPECTED = "Expected <org>.<project>.<namespace>.<action>.<hash>"


def message_value(value: object, limit: int = MESSAGE_VALUE_LIMIT) -> str:
    """A user-supplied value as error messages show it: repr for non-str, cut at ``limit``."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _invalid(value: object) -> InvalidFqdn:
    return InvalidFqdn(f'Invalid FQDN format: "{message_value(value)}". {_EXPECTED}')


def _is_component(value: object) -> bool:
    return isinstance(value, str) and FQDN_COMPONENT.fullmatch(value) is not None


def _is_hash(value: object) -> bool:
    return isinstance(value, str) and HASH_COMPONENT.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Fqdn:
    """A valid FQDN; construction validates every component (``InvalidFqdn`` otherwise)."""

    org: str
    project: str
    namespace: str
    action: str
    hash: str

    def __post_init__(self) -> None:
        names = (self.org, self.project, self.namespace, self.action)
        if not (all(_is_component(part) for part in names) and _is_hash(self.hash)):
            raise _invalid(".".join(str(part) for part in (*names, self.hash)))

    def __str__(self) -> str:
        return f"{self.org}.{self.project}.{self.namespace}.{self.action}.{self.hash}"

    @classmethod
    def parse(cls, value: object) -> Fqdn:
        """Parse ``org.project.namespace.action.hash``; ``InvalidFqdn`` when malformed."""
        if not isinstance(value, str):
            raise _invalid(value)
        parts = value.split(".")
        if len(parts) != 5:
            raise _invalid(value)
        org, project, namespace, action, code_hash = parts
        try:
            return cls(org, project, namespace, action, code_hash)
        except InvalidFqdn:
            raise _invalid(value) from None


def is_fqdn(value: str) -> bool:
    """Whether ``value`` is a well-formed FQDN."""
    try:
        Fqdn.parse(value)
    except InvalidFqdn:
        return False
    return True


def fqdn_candidates(
    org: str, project: str, namespace: str, action: str, code_hash: str
) -> Iterator[Fqdn]:
    """FQDNs with 4, 5, ... hex characters of ``code_hash``; validates eagerly."""
    names = (org, project, namespace, action)
    if not (all(_is_component(part) for part in names) and _is_hash(code_hash)):
        raise _invalid(".".join(str(part) for part in (*names, code_hash)))
    return (
        Fqdn(org, project, namespace, action, code_hash[:length])
        for length in range(MIN_HASH_LENGTH, len(code_hash) + 1)
    )
