"""The capability bundle: a versioned JSON file of capabilities, and its hostile-input checks.

    bundle = load_bundle(Path("caps.json"))    # INVALID_INPUT, nothing read further, if bad
    bundle.capabilities[0].versions[-1].code

A bundle is untrusted input. Before anything is imported it must pass, in this order: the
file size (checked before reading), strict UTF-8, no NUL character, JSON nesting depth
(counted by a linear scan, so no recursion), the JSON itself (no NaN, no duplicate keys),
the strict schema (``extra="forbid"``, exact types, names, tags, sizes and counts), then
each version's code: it parses as a snippet and keeps the ``mcp`` rules, and its hash,
recomputed here, equals the declared one. Code still holding a credential-like literal is
not an error of the file: the record is marked (``secret_line``) and left out on import.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from pml.analysis.code_hash import normalized_code_hash, parse_snippet
from pml.analysis.credentials import looks_secret
from pml.analysis.scan import scan_snippet
from pml.analysis.secret_check import find_secret
from pml.analysis.snippet import DEFAULT_MAX_CODE_BYTES
from pml.errors import InvalidInput, InvalidName, PmlError
from pml.registry.fqdn import FQDN_COMPONENT, is_fqdn, message_value
from pml.registry.names import validate_name
from pml.registry.naming import MAX_DESCRIPTION, MAX_INTENT, check_tags, check_tools_used
from pml.registry.records import check_version_tag

FORMAT = "pml-capabilities"
FORMAT_VERSION = 1
MAX_BUNDLE_BYTES = 50 * 1024 * 1024
MAX_DEPTH = 128  # lifted literal defaults nest up to 100 levels inside a schema
MAX_CAPABILITIES = 5_000
MAX_VERSIONS = 1_000  # per capability
MAX_TOTAL_VERSIONS = 50_000
MAX_ALIASES = 100
MAX_SUMMARY = 4_000
MAX_SHOWN_ERRORS = 3
_SURROGATE = re.compile("[\ud800-\udfff]")

Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _valid(check: Any, value: Any) -> Any:
    """Run a registry check inside a validator: its error becomes the field's error."""
    try:
        return check(value)
    except (InvalidInput, InvalidName) as error:
        raise ValueError(error.message) from None


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class BundleVersion(_Strict):
    """One version of a capability, oldest first in ``versions``."""

    version: Annotated[int, Field(ge=1, le=1_000_000_000)]
    version_tag: str | None = None
    code: Annotated[str, Field(min_length=1, max_length=DEFAULT_MAX_CODE_BYTES)]
    code_hash: Hex64
    parameters_schema: dict[str, Any]
    tools_used: list[str] = Field(default_factory=list[str])
    change_summary: Annotated[str | None, Field(max_length=MAX_SUMMARY)] = None
    updated_at: Annotated[AwareDatetime, Field(strict=False)]

    @field_validator("version_tag")
    @classmethod
    def _tag(cls, value: str | None) -> str | None:
        return _valid(check_version_tag, value)

    @field_validator("tools_used")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        return _valid(check_tools_used, value)


class BundleCapability(_Strict):
    """A capability as exported: identity hints, metadata, aliases and every version."""

    fqdn: str
    display_name: str
    named: bool
    namespace: Annotated[str, Field(pattern=FQDN_COMPONENT.pattern)]
    # The identity hash in the source registry (the code as first written, before literals
    # were lifted). Only used to recognise a duplicate, never stored.
    source_code_hash: Hex64 | None = None
    intent: Annotated[str | None, Field(max_length=MAX_INTENT)] = None
    description: Annotated[str | None, Field(max_length=MAX_DESCRIPTION)] = None
    tags: list[str] = Field(default_factory=list[str])
    visibility: Literal["private", "project", "org", "public"] = "project"
    routing_override: Literal["local", "cloud"] | None = None
    aliases: Annotated[list[str], Field(max_length=MAX_ALIASES)] = Field(default_factory=list[str])
    versions: Annotated[list[BundleVersion], Field(min_length=1, max_length=MAX_VERSIONS)]

    @field_validator("fqdn")
    @classmethod
    def _fqdn(cls, value: str) -> str:
        if not is_fqdn(value):
            raise ValueError(f"not an FQDN: {message_value(value)}")
        return value

    @field_validator("display_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _valid(validate_name, value)

    @field_validator("aliases")
    @classmethod
    def _aliases(cls, value: list[str]) -> list[str]:
        return [_valid(validate_name, alias) for alias in value]

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        return _valid(check_tags, value)

    @field_validator("versions")
    @classmethod
    def _ordered(cls, value: list[BundleVersion]) -> list[BundleVersion]:
        numbers = [version.version for version in value]
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            raise ValueError("versions must be listed oldest first with increasing numbers")
        tags = [version.version_tag for version in value if version.version_tag is not None]
        if len(tags) != len(set(tags)):
            raise ValueError("a version tag may be given to one version only")
        return value

    @property
    def current(self) -> BundleVersion:
        """The latest version (the record's code)."""
        return self.versions[-1]


class BundleSource(_Strict):
    """Where the bundle was exported from (informative)."""

    org: str
    project: str


class Bundle(_Strict):
    """The whole file: ``format``/``version`` header, then the capabilities."""

    format: Literal["pml-capabilities"]
    version: Literal[1]
    exported_at: Annotated[AwareDatetime, Field(strict=False)]
    source: BundleSource | None = None
    capabilities: Annotated[list[BundleCapability], Field(max_length=MAX_CAPABILITIES)]

    @field_validator("capabilities")
    @classmethod
    def _unique(cls, value: list[BundleCapability]) -> list[BundleCapability]:
        fqdns = [item.fqdn for item in value]
        if len(fqdns) != len(set(fqdns)):
            raise ValueError("each capability (fqdn) may appear once")
        if sum(len(item.versions) for item in value) > MAX_TOTAL_VERSIONS:
            raise ValueError(f"at most {MAX_TOTAL_VERSIONS} versions in one bundle")
        return value


def _refused(reason: str) -> InvalidInput:
    return InvalidInput(f"Invalid capability bundle: {reason}. Nothing was imported.")


def read_bundle_text(path: Path, *, max_bytes: int = MAX_BUNDLE_BYTES) -> str:
    """The file's text: size checked before reading, strict UTF-8, no NUL character."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise _refused(f"the file is {size} bytes (max: {max_bytes})")
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)  # the file may grow after stat
    except OSError as error:
        raise InvalidInput(f"Cannot read {path}: {error.strerror or error}") from None
    if len(raw) > max_bytes:
        raise _refused(f"the file is larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _refused(f"not valid UTF-8 (byte {error.start})") from None


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse JSON text nested deeper than ``max_depth`` (a linear scan, no recursion)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise _refused(f"JSON nested deeper than {max_depth} levels")
        elif char in "]}":
            depth -= 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _refused(f"duplicate key {message_value(key)!r}")
        data[key] = value
    return data


def _no_constant(name: str) -> Any:
    raise _refused(f"{name} is not a JSON number")


def _check_strings(data: object) -> None:
    stack: list[object] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\0" in item:
                raise _refused("a NUL character in a string")
            if _SURROGATE.search(item) is not None:
                raise _refused("a string is not valid Unicode (a lone surrogate escape)")
        elif isinstance(item, dict):
            for key, value in cast("dict[str, object]", item).items():
                stack.extend((key, value))
        elif isinstance(item, list):
            stack.extend(cast("list[object]", item))


def parse_bundle(text: str) -> Bundle:
    """Validate bundle text (see the module docstring); ``INVALID_INPUT`` when refused."""
    if "\0" in text:
        raise _refused("a NUL character in the file")
    check_depth(text)
    try:
        data: object = json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant
        )
    except RecursionError:
        raise _refused("JSON nested too deeply") from None
    except ValueError as error:
        raise _refused(f"not JSON ({error})") from None
    _check_strings(data)
    if not isinstance(data, dict):
        raise _refused("the top level must be a JSON object")
    header = cast("dict[str, object]", data)
    if header.get("format") != FORMAT:
        raise _refused(f'"format" must be "{FORMAT}"')
    if header.get("version") != FORMAT_VERSION:
        raise _refused(
            f"unsupported bundle version {message_value(header.get('version'))}; "
            f"this PML reads version {FORMAT_VERSION}"
        )
    try:
        bundle = Bundle.model_validate(data)
    except ValidationError as error:
        raise _refused(_describe(error)) from None
    for item in bundle.capabilities:
        for version in item.versions:
            check_code(item, version)
    return bundle


def load_bundle(path: Path) -> Bundle:
    """Read and validate a bundle file."""
    return parse_bundle(read_bundle_text(path))


def _describe(error: ValidationError) -> str:
    problems: list[str] = []
    for detail in error.errors(include_url=False, include_input=False)[:MAX_SHOWN_ERRORS]:
        where = ".".join(str(part) for part in detail["loc"]) or "bundle"
        problems.append(f"{where}: {detail['msg']}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def check_code(item: BundleCapability, version: BundleVersion) -> None:
    """The version's code parses as a snippet and its recomputed hash is the declared one."""
    where = f"{item.display_name} version {version.version}"
    size = len(version.code.encode("utf-8"))
    if size > DEFAULT_MAX_CODE_BYTES:
        raise _refused(f"{where}: code is {size} bytes (max: {DEFAULT_MAX_CODE_BYTES})")
    try:
        scan_snippet(parse_snippet(version.code), version.code)
        recomputed = normalized_code_hash(version.code)
    except PmlError as error:
        raise _refused(f"{where}: {error.message}") from None
    if recomputed != version.code_hash:
        raise _refused(f"{where}: code_hash does not match the code")


def secret_line(code: str) -> int | None:
    """The line of the first credential-like literal in stored code (``None`` if none).

    The checks of capture, on code that capture already stored: a literal it would have
    lifted as a secret (a tool argument, an ``args.get`` default, a secret assigned or
    passed anywhere), and any other string constant whose text looks like a credential.
    """
    tree = parse_snippet(code)
    scan = scan_snippet(tree, code)
    lines = [use.line for use in scan.literals if not use.kwarg]
    lines += [
        use.line for use in scan.literals if use.kwarg and looks_secret(use.keyword, use.value)
    ]
    lines += [
        use.line
        for use in scan.args_uses
        if use.literal and use.has_default and looks_secret(use.key, use.default)
    ]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and looks_secret("", node.value)
        ):
            lines.append(node.lineno)
    finding = find_secret(code)  # comments, f-string text, bytes, glued constants, names
    if finding is not None:
        lines.append(finding.line)
    return min(lines) if lines else None


def code_references(code: str) -> list[str]:
    """The ``mcp["<fqdn>"]`` references of stored code, in source order."""
    scan = scan_snippet(parse_snippet(code), code)
    found = [ref.site.name for ref in scan.references if not ref.site.namespace]
    return [name for name in dict.fromkeys(found) if is_fqdn(name)]


def json_text(bundle: dict[str, Any]) -> str:
    """A bundle dict as the file's text."""
    return json.dumps(bundle, ensure_ascii=False, indent=2, sort_keys=False) + "\n"


def iso(moment: datetime) -> str:
    """A datetime as bundles write it."""
    return moment.isoformat()


def all_refs(item: BundleCapability) -> Sequence[str]:
    """Every FQDN a capability's versions name (tools used and code references)."""
    refs: list[str] = []
    for version in item.versions:
        refs.extend(ref for ref in version.tools_used if is_fqdn(ref))
        refs.extend(code_references(version.code))
    return list(dict.fromkeys(refs))
