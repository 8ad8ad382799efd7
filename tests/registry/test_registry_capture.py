"""Capturing runs: identity, deduplication, auto names, routing and usage (both backends)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pml.analysis.code_hash import normalized_code_hash
from pml.errors import CodeSyntaxError, InvalidInput, InvalidName, NameTaken
from pml.registry.fqdn import Fqdn
from pml.registry.records import blank_record
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RoutingRules
from pml.storage.capability_repo import SqlCapabilityRepository
from pml.storage.database import Database
from pml.storage.types import utc_now

pytestmark = pytest.mark.anyio

READ = "text = await mcp.filesystem.read_text_file(path='a.json')\nreturn text"


async def test_first_capture_creates_an_unnamed_capability_with_an_auto_fqdn(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    result = await registry.capture(
        scope,
        CapabilityDraft(code=READ, intent="read a.json", tools_used=["filesystem:read_text_file"]),
        latency_ms=12.5,
    )
    digest = normalized_code_hash(READ)
    record = result.record
    assert result.created
    assert record.fqdn == f"acme.webapp.fs.exec_{digest[:8]}.{digest[:4]}"
    assert record.display_name == f"unnamed_{digest[:8]}"
    assert not record.named
    assert (record.namespace, record.action) == ("fs", f"exec_{digest[:8]}")
    assert record.routing == "local"
    assert record.version == 1
    assert (record.usage_count, record.success_count, record.total_latency_ms) == (1, 1, 12.5)
    assert record.created_by == record.updated_by == "erwan"


async def test_same_code_reformatted_is_the_same_capability_and_counts_usage(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    first = await registry.capture(scope, CapabilityDraft(code=READ), latency_ms=10)
    reformatted = (
        "# read it\ntext = await mcp.filesystem.read_text_file(path = 'a.json')\n\nreturn (text)\n"
    )
    second = await registry.capture(scope, CapabilityDraft(code=reformatted), latency_ms=30)
    assert not second.created
    assert second.record.fqdn == first.record.fqdn
    assert (second.record.usage_count, second.record.total_latency_ms) == (2, 40)


async def test_a_changed_literal_is_a_different_capability(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    first = await registry.capture(scope, CapabilityDraft(code=READ), latency_ms=1)
    other = await registry.capture(
        scope, CapabilityDraft(code=READ.replace("a.json", "b.json")), latency_ms=1
    )
    assert other.created
    assert other.record.fqdn != first.record.fqdn


async def test_same_code_in_another_scope_is_another_capability(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    mine = await registry.capture(scope, CapabilityDraft(code=READ), latency_ms=1)
    theirs = await registry.capture(
        Scope("globex", "webapp", "hank"), CapabilityDraft(code=READ), latency_ms=1
    )
    assert theirs.created
    assert theirs.record.fqdn.startswith("globex.webapp.")
    assert mine.record.usage_count == 1


async def test_namespace_comes_from_the_first_tools_server(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    cases = {
        "return await mcp.git.git_status(repo_path='.')": (["git:git_status"], "git"),
        "return 1 + 1": ([], "code"),
        "return await mcp.filesystem.list_directory(path='.')": (
            ["filesystem:list_directory", "git:git_log"],
            "fs",
        ),
    }
    for code, (tools, namespace) in cases.items():
        record = (
            await registry.capture(
                scope, CapabilityDraft(code=code, tools_used=tools), latency_ms=1
            )
        ).record
        assert record.namespace == namespace
        assert Fqdn.parse(record.fqdn).namespace == namespace


async def test_fqdn_hash_grows_only_when_four_hex_would_collide(
    db: Database, registry: CapabilityRegistry, scope: Scope
) -> None:
    digest = normalized_code_hash(READ)
    squatter = f"acme.webapp.fs.exec_{digest[:8]}.{digest[:4]}"
    async with db.transaction() as conn:
        squatting = replace(
            blank_record(scope, squatter, utc_now()),
            display_name="squatter",
            tool_name="mcp__fs__squatter",
        )
        await SqlCapabilityRepository(conn).insert_record(squatting)
    result = await registry.capture(
        scope, CapabilityDraft(code=READ, tools_used=["filesystem:read_text_file"]), latency_ms=1
    )
    assert Fqdn.parse(result.record.fqdn).hash == digest[:5]


async def test_routing_is_cloud_only_when_every_server_is_cloud(db: Database, scope: Scope) -> None:
    registry = CapabilityRegistry(db, routing=RoutingRules(cloud=("search-*", "time")))
    cloud = await registry.capture(
        scope,
        CapabilityDraft(code="return await mcp.time.get_current_time()", tools_used=["time:now"]),
        latency_ms=1,
    )
    mixed = await registry.capture(
        scope,
        CapabilityDraft(code="return 2", tools_used=["search-web:query", "filesystem:read"]),
        latency_ms=1,
    )
    pure = await registry.capture(scope, CapabilityDraft(code="return 3"), latency_ms=1)
    forced = await registry.capture(
        scope,
        CapabilityDraft(code="return 4", tools_used=["time:now"], routing="local"),
        latency_ms=1,
    )
    assert [r.record.routing for r in (cloud, mixed, pure, forced)] == [
        "cloud",
        "local",
        "cloud",
        "local",
    ]


async def test_a_capability_used_by_a_capability_contributes_its_routing(
    db: Database, scope: Scope
) -> None:
    registry = CapabilityRegistry(db, routing=RoutingRules(cloud=("time",)))
    inner = await registry.capture(
        scope,
        CapabilityDraft(code="return 1", tools_used=["filesystem:read"], name="fs:inner"),
        latency_ms=1,
    )
    outer = await registry.capture(
        scope,
        CapabilityDraft(code="return 2", tools_used=["time:now", inner.record.fqdn]),
        latency_ms=1,
    )
    assert inner.record.routing == "local"
    assert outer.record.routing == "local"


async def test_capture_with_a_name_sets_display_tool_name_and_fqdn(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    result = await registry.capture(
        scope, CapabilityDraft(code=READ, name="fs:read_json"), latency_ms=1
    )
    record = result.record
    assert (record.display_name, record.tool_name, record.named) == (
        "fs:read_json",
        "mcp__fs__read_json",
        True,
    )
    assert record.fqdn.startswith("acme.webapp.fs.read_json.")


async def test_capture_refuses_a_taken_name_and_stores_nothing(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    await registry.capture(scope, CapabilityDraft(code="return 1", name="my-reader"), latency_ms=1)
    with pytest.raises(NameTaken) as caught:
        await registry.capture(
            scope, CapabilityDraft(code="return 2", name="my-reader"), latency_ms=1
        )
    assert caught.value.message == "Capability name 'my-reader' already exists in scope acme.webapp"
    assert (await registry.counts(scope))["named"] == 1
    assert (await registry.counts(scope))["unnamed"] == 0


@pytest.mark.parametrize(
    "name", ["", "has space", "x'; DROP TABLE capability_records; --", "rеader", "a" * 65, "a.b"]
)
async def test_capture_refuses_an_invalid_name_and_stores_nothing(
    registry: CapabilityRegistry, scope: Scope, name: str
) -> None:
    with pytest.raises(InvalidName) as caught:
        await registry.capture(scope, CapabilityDraft(code="return 1", name=name), latency_ms=1)
    assert caught.value.message.endswith(
        "Must be alphanumeric with underscores, hyphens, and colons only."
    )
    assert await registry.counts(scope) == {"named": 0, "unnamed": 0, "mcp_servers": 3}


async def test_code_that_does_not_parse_is_a_syntax_error_and_stores_nothing(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    with pytest.raises(CodeSyntaxError) as caught:
        await registry.capture(scope, CapabilityDraft(code="return (1"), latency_ms=1)
    assert caught.value.data["line"] == 1
    assert (await registry.counts(scope))["unnamed"] == 0


async def test_naming_a_deduplicated_unnamed_capability_names_it(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    first = await registry.capture(scope, CapabilityDraft(code=READ), latency_ms=1)
    again = await registry.capture(
        scope, CapabilityDraft(code=READ, name="fs:read_a"), latency_ms=1
    )
    assert again.record.fqdn == first.record.fqdn
    assert again.record.display_name == "fs:read_a"
    assert (await registry.resolve(scope, first.record.display_name)).via_alias is not None


async def test_usage_records_failures_and_latency(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    record = (await registry.capture(scope, CapabilityDraft(code="return 1"), latency_ms=10)).record
    await registry.record_usage(record.fqdn, success=False, latency_ms=5)
    await registry.record_usage(record.fqdn, success=True, latency_ms=7.5)
    found = (await registry.resolve(scope, record.fqdn)).record
    assert (found.usage_count, found.success_count, found.total_latency_ms) == (3, 2, 22.5)
    assert found.success_rate == pytest.approx(2 / 3)
    assert found.last_used_at is not None
    assert found.last_used_at >= record.last_used_at  # type: ignore[operator]


@pytest.mark.parametrize(
    ("field", "draft"),
    [
        ("intent", CapabilityDraft(code="return 1", intent="x" * 10_001)),
        ("intent", CapabilityDraft(code="return 1", intent=42)),  # type: ignore[arg-type]
        ("description", CapabilityDraft(code="return 1", description="d" * 4001)),
        ("tools_used", CapabilityDraft(code="return 1", tools_used="filesystem:read")),
        ("tools_used", CapabilityDraft(code="return 1", tools_used=[1, 2])),  # type: ignore[list-item]
        ("tools_used", CapabilityDraft(code="return 1", tools_used=["t"] * 1001)),
        ("tools_used", CapabilityDraft(code="return 1", tools_used=[""])),
        ("parameters_schema", CapabilityDraft(code="return 1", parameters_schema=[])),  # type: ignore[arg-type]
        ("tags", CapabilityDraft(code="return 1", tags=["a b"])),
        ("visibility", CapabilityDraft(code="return 1", visibility="everyone")),  # type: ignore[arg-type]
        ("code", CapabilityDraft(code=b"return 1")),  # type: ignore[arg-type]
    ],
)
async def test_malformed_drafts_are_invalid_input_naming_the_field_and_store_nothing(
    registry: CapabilityRegistry, scope: Scope, field: str, draft: CapabilityDraft
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await registry.capture(scope, draft, latency_ms=1)
    assert caught.value.data.get("field") == field
    assert await registry.counts(scope) == {"named": 0, "unnamed": 0, "mcp_servers": 3}


@pytest.mark.parametrize("latency", [-1, float("nan"), float("inf"), True, "5"])
async def test_a_bad_latency_is_refused_and_counts_nothing(
    registry: CapabilityRegistry, scope: Scope, latency: object
) -> None:
    record = (await registry.capture(scope, CapabilityDraft(code="return 1"), latency_ms=1)).record
    with pytest.raises(InvalidInput):
        await registry.record_usage(record.fqdn, success=True, latency_ms=latency)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await registry.capture(scope, CapabilityDraft(code="return 1"), latency_ms=latency)  # type: ignore[arg-type]
    assert (await registry.resolve(scope, record.fqdn)).record.usage_count == 1


async def test_stored_code_rewritten_from_the_run_keeps_the_identity_of_the_code_as_written(
    registry: CapabilityRegistry, scope: Scope
) -> None:
    stored = "text = await mcp.filesystem.read_text_file(path=args['path'])\nreturn text"
    written = normalized_code_hash(READ)
    first = await registry.capture(
        scope, CapabilityDraft(code=stored, code_hash=written), latency_ms=1
    )
    again = await registry.capture(scope, CapabilityDraft(code=READ), latency_ms=1)
    other = await registry.capture(scope, CapabilityDraft(code=stored), latency_ms=1)
    assert first.record.code == stored
    assert first.record.code_hash == written
    assert first.record.fqdn.endswith("." + written[:4])
    assert not again.created
    assert again.record.fqdn == first.record.fqdn
    assert other.created  # the rewrite alone is other code


@pytest.mark.parametrize("bad", ["", "abc", "G" * 64, "A" * 64, "0" * 63, "0" * 65])
async def test_a_malformed_code_hash_is_refused_and_nothing_is_stored(
    registry: CapabilityRegistry, scope: Scope, bad: str
) -> None:
    with pytest.raises(InvalidInput, match="code_hash"):
        await registry.capture(scope, CapabilityDraft(code=READ, code_hash=bad), latency_ms=1)
    assert (await registry.counts(scope))["unnamed"] == 0
