"""Capability bundles: export from one registry, import into another (or the same) scope."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pml.analysis.code_hash import normalized_code_hash
from pml.errors import InvalidInput
from pml.registry.bundle import export_capabilities
from pml.registry.bundle_import import ImportReport, import_bundle
from pml.registry.bundle_schema import (
    MAX_BUNDLE_BYTES,
    MAX_CAPABILITIES,
    MAX_VERSIONS,
    json_text,
    load_bundle,
    parse_bundle,
)
from pml.registry.changes import CapabilityChange
from pml.registry.lifecycle import CapabilityLifecycle
from pml.registry.models import ListQuery, RenameChanges, RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

TARGET = Scope("globex", "tools", "zoe")
RULES = RoutingRules(cloud=("search*",))
SECRET = "ghp_" + "Zq8xT2mK9vL4nB7cR1wY5sD3fG6hJ0pQ"


async def capture(registry: CapabilityRegistry, scope: Scope, code: str, **draft: Any) -> str:
    result = await registry.capture(scope, CapabilityDraft(code=code, **draft), latency_ms=1.0)
    return result.record.fqdn


async def bundle_of(db: Database, scope: Scope, **options: Any) -> dict[str, Any]:
    return (await export_capabilities(db, scope, **options)).bundle


async def run_import(
    registry: CapabilityRegistry, bundle: dict[str, Any], **options: Any
) -> ImportReport:
    return await import_bundle(
        registry, TARGET, parse_bundle(json_text(bundle)), rules=RULES, **options
    )


async def active_count(registry: CapabilityRegistry, scope: Scope) -> int:
    return (await registry.list(scope, ListQuery(limit=500))).total


def version(code: str, number: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "version": number,
        "code": code,
        "code_hash": normalized_code_hash(code) if "(" not in code[-1:] else "0" * 64,
        "parameters_schema": {"type": "object", "properties": {}},
        "updated_at": "2025-06-01T10:00:00+00:00",
        **fields,
    }


def capability(name: str, code: str = "return 1", **fields: Any) -> dict[str, Any]:
    return {
        "fqdn": f"acme.webapp.code.{name.replace(':', '_')}.abcd",
        "display_name": name,
        "named": True,
        "namespace": "code",
        "versions": [version(code)],
        **fields,
    }


def bundle(*capabilities: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": "pml-capabilities",
        "version": 1,
        "exported_at": "2025-06-02T00:00:00+00:00",
        "capabilities": list(capabilities),
    }


@pytest.mark.postgres
async def test_round_trip_from_sqlite_to_postgres_keeps_versions_tags_aliases_and_nested_calls(
    sqlite_url: str, postgres_url: str, scope: Scope
) -> None:
    source_db, target_db = await Database.open(sqlite_url), await Database.open(postgres_url)
    try:
        source, target = CapabilityRegistry(source_db), CapabilityRegistry(target_db)
        inner = await capture(
            source, scope, "return args['x'] * 2", name="math:double", tags=["math"]
        )
        await source.update_code(
            scope,
            "math:double",
            CapabilityDraft("return args['x'] + args['x']", version_tag="v1.1.0"),
        )
        code = f'return await mcp["{inner}"](x=3)'
        await capture(
            source, scope, code, name="math:six", tools_used=[inner], intent="six", description="d"
        )
        await source.rename(scope, "math:six", RenameChanges(new_name="math:sixer"))

        report = await run_import(target, await bundle_of(source_db, scope))

        assert [entry["name"] for entry in report.imported] == ["math:double", "math:sixer"]
        double = await target.resolve(TARGET, "math:double@v1.1.0")
        assert double.record.fqdn.startswith("globex.tools.math.double.")
        assert double.record.created_by == "zoe"
        assert double.record.tags == ["math"]
        assert double.version.version == 2
        assert double.version.code == "return args['x'] + args['x']"
        _, history, _ = await target.history(TARGET, "math:double")
        assert [(v.version, v.version_tag) for v in history] == [(2, "v1.1.0"), (1, None)]
        assert history[1].code == "return args['x'] * 2"
        assert (
            history[1]
            .updated_at.isoformat()
            .startswith(
                (await source.history(scope, "math:double"))[1][1].updated_at.isoformat()[:19]
            )
        )
        six = await target.resolve(TARGET, "math:six")  # the alias came along
        assert six.via_alias == "math:six"
        assert six.record.display_name == "math:sixer"
        assert six.record.code == f'return await mcp["{double.record.fqdn}"](x=3)'
        assert six.record.tools_used == [double.record.fqdn]
        assert (six.record.intent, six.record.description) == ("six", "d")
        assert report.unresolved == []
    finally:
        await source_db.close()
        await target_db.close()


async def test_export_leaves_out_code_with_a_secret_literal(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await capture(registry, scope, "return 1", name="plain")
    leaky = await capture(registry, scope, f'token = "{SECRET}"\nreturn token', name="leaky")

    result = await export_capabilities(db, scope)

    assert [item["display_name"] for item in result.bundle["capabilities"]] == ["plain"]
    assert result.left_out == [
        {
            "name": "leaky",
            "fqdn": leaky,
            "reason": "secret",
            "message": "version 1, line 1 holds a credential-like literal",
        }
    ]
    assert SECRET not in json_text(result.bundle)


async def test_export_takes_the_pattern_and_leaves_out_archived_unnamed_and_servers(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.register_mcp_server(scope, "filesystem", code_url="npx fs")
    await capture(registry, scope, "return 1", name="fs:one")
    await capture(registry, scope, "return 2", name="fs:two")
    await capture(registry, scope, "return 3", name="other")
    await capture(registry, scope, "return 4")
    await CapabilityLifecycle(registry).archive(scope, "fs:two")

    names = [c["display_name"] for c in (await bundle_of(db, scope))["capabilities"]]
    fs_only = await bundle_of(db, scope, pattern="fs:*")
    named = await bundle_of(db, scope, named_only=True)

    assert sorted(names) == ["fs:one", "other", "unnamed_" + normalized_code_hash("return 4")[:8]]
    assert [c["display_name"] for c in fs_only["capabilities"]] == ["fs:one"]
    assert sorted(c["display_name"] for c in named["capabilities"]) == ["fs:one", "other"]
    assert "usage_count" not in json.dumps(named)


async def test_a_capability_whose_code_is_there_already_is_skipped_with_its_name(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await capture(registry, scope, "return 42", name="answer")
    exported = await bundle_of(db, scope)
    await capture(registry, TARGET, "return 42", name="local_answer")

    report = await run_import(registry, exported)

    assert report.imported == []
    [skipped] = report.skipped
    assert skipped["reason"] == "duplicate"
    assert skipped["existing"] == "local_answer"
    assert await active_count(registry, TARGET) == 1


async def test_importing_twice_imports_once(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await capture(registry, scope, "return 1", name="one")
    await capture(registry, scope, "return 2")
    exported = await bundle_of(db, scope)

    first = await run_import(registry, exported)
    second = await run_import(registry, exported)

    assert len(first.imported) == 2
    assert second.imported == []
    assert {s["reason"] for s in second.skipped} == {"duplicate"}
    assert await active_count(registry, TARGET) == 2


async def test_name_conflicts_are_skipped_by_default_and_renamed_on_request(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await capture(registry, scope, "return 1", name="report")
    exported = await bundle_of(db, scope)
    await capture(registry, TARGET, "return 99", name="report")
    await capture(registry, TARGET, "return 98", name="report_2")

    skipped = await run_import(registry, exported)
    renamed = await run_import(registry, exported, on_conflict="rename")

    assert skipped.imported == []
    assert skipped.skipped[0]["reason"] == "name_taken"
    assert "'report' already exists" in skipped.skipped[0]["message"]
    [entry] = renamed.renamed
    assert (entry["from"], entry["name"]) == ("report", "report_3")
    found = await registry.resolve(TARGET, "report_3")
    assert found.record.code == "return 1"
    assert found.record.fqdn == entry["fqdn"]


async def test_dry_run_reports_the_same_and_changes_nothing(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    changes: list[CapabilityChange] = []

    async def listen(change: CapabilityChange) -> None:
        changes.append(change)

    await capture(registry, scope, "return 1", name="one")
    await capture(registry, scope, "return 2", name="two")
    exported = await bundle_of(db, scope)
    registry.on_change(listen)

    dry = await run_import(registry, exported, dry_run=True)

    assert [e["name"] for e in dry.imported] == ["one", "two"]
    assert dry.dry_run
    assert await active_count(registry, TARGET) == 0
    assert changes == []
    real = await run_import(registry, exported)
    assert [e["name"] for e in real.imported] == ["one", "two"]
    assert {change.fqdn for change in changes} == {e["fqdn"] for e in real.imported}


async def test_a_failure_midway_leaves_nothing_imported(
    db: Database, registry: CapabilityRegistry, scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    await capture(registry, scope, "return 1", name="one")
    await capture(registry, scope, "return 2", name="two")
    await registry.rename(scope, "two", RenameChanges(new_name="deux"))
    exported = await bundle_of(db, scope)

    async def broken(*_: object, **__: object) -> None:
        raise InvalidInput("disk on fire")

    monkeypatch.setattr(SqlCapabilityRepository, "insert_alias", broken)
    with pytest.raises(InvalidInput, match="disk on fire"):
        await run_import(registry, exported)

    assert await active_count(registry, TARGET) == 0


async def test_references_outside_the_bundle_are_kept_and_reported(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    inner = await capture(registry, scope, "return 5", name="inner")
    await capture(
        registry, scope, f'return await mcp["{inner}"]()', name="outer", tools_used=[inner]
    )
    exported = await bundle_of(db, scope, pattern="outer")

    report = await run_import(registry, exported)

    [entry] = report.imported
    assert report.unresolved == [{"name": "outer", "fqdn": entry["fqdn"], "reference": inner}]
    found = await registry.resolve(TARGET, "outer")
    assert found.record.code == f'return await mcp["{inner}"]()'


async def test_routing_follows_the_target_rules_unless_overridden(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    await capture(registry, scope, "return 1", name="searcher", tools_used=["search:query"])
    await capture(registry, scope, "return 2", name="pinned", routing="local")
    exported = await bundle_of(db, scope)

    await run_import(registry, exported)

    assert (await registry.resolve(TARGET, "searcher")).record.routing == "cloud"
    pinned = (await registry.resolve(TARGET, "pinned")).record
    assert (pinned.routing, pinned.routing_override) == ("local", "local")


async def test_the_import_is_audited_once(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    class Auditor:
        def emit(self, event: str, **fields: Any) -> None:
            events.append((event, fields["details"]))

    registry.auditor = Auditor()  # pyright: ignore[reportAttributeAccessIssue]
    await capture(registry, scope, "return 1", name="one")
    await run_import(registry, await bundle_of(db, scope))

    [(event, details)] = events
    assert event == "CAPABILITIES_IMPORTED"
    assert details["imported"][0]["from"].startswith("acme.webapp.")


async def test_an_imported_record_with_a_secret_literal_is_refused(
    registry: CapabilityRegistry,
) -> None:
    leaky = capability("leaky", f'key = "{SECRET}"\nreturn key')

    report = await run_import(registry, bundle(capability("fine"), leaky))

    assert [e["name"] for e in report.imported] == ["fine"]
    assert [(s["name"], s["reason"]) for s in report.skipped] == [("leaky", "secret")]


def _with(path: str, value: Any) -> dict[str, Any]:
    """A valid bundle with one field (dotted path, list indexes as numbers) replaced."""
    data = bundle(capability("good"))
    target: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return data


HOSTILE: dict[str, tuple[str, str]] = {
    "future version": (json.dumps(_with("version", 2)), "unsupported bundle version 2"),
    "other format": (json.dumps(_with("format", "zip")), '"format" must be'),
    "wrong type": (json.dumps(_with("capabilities.0.named", "yes")), "named"),
    "string number": (json.dumps(_with("capabilities.0.versions.0.version", "1")), "version"),
    "unknown field": (json.dumps(_with("capabilities.0.usage_count", 5)), "usage_count"),
    "injection name": (
        json.dumps(_with("capabilities.0.display_name", "x'; DROP TABLE capability_records;--")),
        "Invalid capability name",
    ),
    "unicode name": (
        json.dumps(_with("capabilities.0.display_name", "café")),
        "Invalid capability name",
    ),
    "long name": (json.dumps(_with("capabilities.0.display_name", "n" * 65)), "display_name"),
    "bad alias": (json.dumps(_with("capabilities.0.aliases", ["../etc"])), "aliases"),
    "bad tag": (
        json.dumps(_with("capabilities.0.versions.0.version_tag", "latest")),
        "version tag",
    ),
    "bad fqdn": (json.dumps(_with("capabilities.0.fqdn", "a.b")), "not an FQDN"),
    "huge description": (
        json.dumps(_with("capabilities.0.description", "d" * 100_000)),
        "description",
    ),
    "huge code": (json.dumps(_with("capabilities.0.versions.0.code", "#" * 200_000)), "code"),
    "no versions": (json.dumps(_with("capabilities.0.versions", [])), "versions"),
    "code does not parse": (
        json.dumps(_with("capabilities.0.versions.0", version("return ("))),
        "Syntax error",
    ),
    "mcp rebound": (json.dumps(_with("capabilities.0.versions.0", version("mcp = 1"))), "mcp"),
    "hash mismatch": (
        json.dumps(_with("capabilities.0.versions.0.code_hash", normalized_code_hash("return 2"))),
        "code_hash does not match",
    ),
    "nul escape": (json.dumps(_with("capabilities.0.intent", "a\0b")), "NUL"),
    "lone surrogate": (json.dumps(_with("capabilities.0.intent", "\ud800")), "lone surrogate"),
    "deep nesting": (
        '{"format": "pml-capabilities", "version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested deeper than",
    ),
    "duplicate key": ('{"format": "pml-capabilities", "format": "x"}', "duplicate key"),
    "nan": ('{"format": "pml-capabilities", "version": NaN}', "NaN"),
    "not an object": ("[]", "top level"),
    "not json": ("{", "not JSON"),
}


@pytest.mark.parametrize(("text", "message"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_bundles_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_bundle(text)

    assert caught.value.message.startswith("Invalid capability bundle: ")
    assert message in caught.value.message
    assert len(caught.value.message) < 1000  # never echoes the hostile input


def test_too_many_capabilities_or_versions_are_refused() -> None:
    many = bundle(*[capability(f"c{n}") for n in range(MAX_CAPABILITIES + 1)])
    one = capability("long")
    one["versions"] = [version(f"return {n}", n + 1) for n in range(MAX_VERSIONS + 1)]

    for data in (many, bundle(one)):
        with pytest.raises(InvalidInput, match="at most"):
            parse_bundle(json.dumps(data))


def test_a_file_too_large_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.truncate(MAX_BUNDLE_BYTES + 1)  # sparse: refused from its size alone

    with pytest.raises(InvalidInput, match=f"max: {MAX_BUNDLE_BYTES}"):
        load_bundle(path)


def test_invalid_utf8_and_raw_nul_are_refused(tmp_path: Path) -> None:
    good = json.dumps(bundle(capability("good"))).encode()
    (tmp_path / "latin1.json").write_bytes(good.replace(b'"good"', b'"g\xe9"', 1))
    (tmp_path / "nul.json").write_bytes(good.replace(b"return 1", b"return\x001", 1))

    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        load_bundle(tmp_path / "latin1.json")
    with pytest.raises(InvalidInput, match="NUL"):
        load_bundle(tmp_path / "nul.json")
    assert load_bundle(_write(tmp_path, good)).capabilities[0].display_name == "good"


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "good.json"
    path.write_bytes(data)
    return path


def test_a_valid_bundle_parses_with_its_tags_normalised() -> None:
    item = capability("good")
    item["versions"] = [version("return 1", 1, version_tag="1.02.0")]
    parsed = parse_bundle(json.dumps(bundle(copy.deepcopy(item))))

    assert parsed.capabilities[0].current.version_tag == "v1.2.0"
