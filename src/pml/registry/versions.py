"""Version specifiers (``name@v1``, ``name@v1.2.0``, ``name@latest``, ``name@2025-12-22``).

A specifier is parsed into a :class:`VersionSpec` and then selects one version among a
capability's versions (SPEC §6.7). ``cap_history`` diffs use :func:`unified_diff`.

Example::

    >>> name, raw = split_name_and_spec("my-reader@v1")
    >>> spec = parse_version_spec(raw, name)
    >>> spec.kind, spec.major
    ('major', 1)
    >>> parse_version_spec("1.2.0", name).tag
    'v1.2.0'
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from pml.errors import VersionNotFound
from pml.registry.fqdn import message_value

SpecKind = Literal["latest", "major", "tag", "date"]

# ASCII digits only (``\d`` would accept '١'); at most 9 per number so that ints stay small.
_NUMBER = r"([0-9]{1,9})"
_MAJOR = re.compile(rf"v?{_NUMBER}")
_TAG = re.compile(rf"v?{_NUMBER}\.{_NUMBER}\.{_NUMBER}")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")


@dataclass(frozen=True, slots=True)
class VersionSpec:
    """A parsed version specifier; ``raw`` is what the user wrote (``latest`` for none)."""

    kind: SpecKind
    raw: str
    major: int | None = None
    tag: str | None = None
    day: dt.date | None = None


class VersionLike(Protocol):
    """What :func:`select_version` needs of a version record."""

    @property
    def version(self) -> int: ...

    @property
    def version_tag(self) -> str | None: ...

    @property
    def updated_at(self) -> dt.datetime: ...


V = TypeVar("V", bound=VersionLike)


def _not_found(spec: object, name: str) -> VersionNotFound:
    return VersionNotFound(f"Version {message_value(spec)} not found for {message_value(name)}")


def split_name_and_spec(ref: str) -> tuple[str, str | None]:
    """Split ``name@spec`` at the last ``@``; ``(ref, None)`` without one."""
    name, sep, spec = ref.rpartition("@")
    return (name, spec) if sep else (ref, None)


def normalise_tag(tag: str) -> str | None:
    """``vX.Y.Z`` for a semantic tag (``1.02.0`` → ``v1.2.0``); ``None`` if not one."""
    match = _TAG.fullmatch(tag)
    if match is None:
        return None
    major, minor, patch = (int(group) for group in match.groups())
    return f"v{major}.{minor}.{patch}"


def _major_of(version: VersionLike) -> int:
    tag = version.version_tag
    if tag is not None:
        match = _TAG.fullmatch(tag)
        if match is not None:
            return int(match.group(1))
    return version.version


def parse_version_spec(spec: str | None, name: str) -> VersionSpec:
    """Parse a specifier; ``VersionNotFound`` when it is not one of the accepted forms."""
    if spec is None or spec == "latest":
        return VersionSpec("latest", "latest")
    if not isinstance(spec, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise _not_found(spec, name)
    value = spec
    major = _MAJOR.fullmatch(value)
    if major is not None:
        return VersionSpec("major", value, major=int(major.group(1)))
    tag = normalise_tag(value)
    if tag is not None:
        return VersionSpec("tag", value, tag=tag)
    date = _DATE.fullmatch(value)
    if date is not None:
        try:
            day = dt.date(*(int(group) for group in date.groups()))
        except ValueError:
            raise _not_found(value, name) from None
        return VersionSpec("date", value, day=day)
    raise _not_found(value, name)


def _as_utc(moment: dt.datetime) -> dt.datetime:
    # The protocol promises aware UTC; a naive value is read as UTC rather than failing.
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def _matches(version: VersionLike, spec: VersionSpec) -> bool:
    if spec.kind == "latest":
        return True
    if spec.kind == "major":
        return _major_of(version) == spec.major
    if spec.kind == "tag":
        tag = version.version_tag
        return tag is not None and normalise_tag(tag) == spec.tag
    if spec.day is None:
        return False
    if spec.day == dt.date.max:
        return True
    end = dt.datetime.combine(spec.day + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
    return _as_utc(version.updated_at) < end


def select_version(versions: Sequence[V], spec: VersionSpec, name: str) -> V:
    """The highest version that the specifier selects; ``VersionNotFound`` if none."""
    chosen: V | None = None
    for version in versions:
        if _matches(version, spec) and (chosen is None or version.version > chosen.version):
            chosen = version
    if chosen is None:
        raise _not_found(spec.raw, name)
    return chosen


def _lines(text: str) -> list[str]:
    # Split on "\n" only (``splitlines`` also splits on \r, \f, \u2028 ... inside a line).
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    """A unified diff from ``old`` to ``new``; the empty string when they are equal."""
    if old == new:
        return ""
    out: list[str] = []
    for line in difflib.unified_diff(
        _lines(old), _lines(new), fromfile=old_label, tofile=new_label
    ):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
