"""``cap_curate`` through ``CurationService`` on a real registry (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from pml.curation import CurationService
from pml.errors import InvalidInput, NotFound
from pml.gateway.schemas import CurateParams
from pml.registry.models import CapabilityRecord, ListQuery, RenameChanges
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.sections import CurationSettings
from pml.storage.database import Database

pytestmark = pytest.mark.anyio

OTHER = Scope("globex", "webapp", "eve")


async def capture(
    registry: CapabilityRegistry,
    scope: Scope,
    intent: str,
    tools: list[str],
    *,
    code: str | None = None,
    uses: int = 1,
    visibility: Visibility = "project",
    name: str | None = None,
) -> CapabilityRecord:
    """A capability with ``uses`` successful runs (the same code captured again counts)."""
    draft = CapabilityDraft(
        code=code or f"return {intent!r}",
        intent=intent,
        tools_used=tools,
        visibility=visibility,
        name=name,
    )
    result = await registry.capture(scope, draft, latency_ms=1.0)
    for _ in range(uses - 1):
        result = await registry.capture(scope, draft, latency_ms=1.0)
    return result.record


async def names(registry: CapabilityRegistry, scope: Scope) -> dict[str, str]:
    page = await registry.list(scope, ListQuery(limit=500))
    return {record.fqdn: record.display_name for record in page.items}


FIVE = [
    ("read and parse JSON config file", ["filesystem:read_text_file"]),
    ("list files in a directory", ["filesystem:list_directory"]),
    ("get current time in Tokyo", ["time:get_current_time"]),
    ("summarize recent git commits", ["git:git_log", "git:git_show"]),
    ("", []),
]


@pytest.fixture
def curation(registry: CapabilityRegistry, db: Database) -> CurationService:
    return CurationService(registry, db)


async def test_suggest_returns_a_suggestion_per_unnamed_capability_and_changes_nothing(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:  # AC1
    records = [await capture(registry, scope, intent, tools) for intent, tools in FIVE]
    before = await names(registry, scope)

    answer = await curation.call(scope, {"mode": "suggest"})

    assert await names(registry, scope) == before
    assert answer["mode"] == "suggest"
    assert answer["applied"] == answer["skipped"] == []
    assert (answer["considered"], answer["matching"], answer["limit"]) == (5, 5, 200)
    by_id = {item["id"]: item for item in answer["suggestions"]}
    assert set(by_id) == {record.fqdn for record in records}
    for record in records:
        item = by_id[record.fqdn]
        assert set(item) == {"id", "currentName", "suggestedName", "confidence", "reasoning"}
        assert item["currentName"] == record.display_name
        assert 0 <= item["confidence"] <= 1
        assert item["reasoning"].endswith(".")
    suggested = {by_id[r.fqdn]["suggestedName"] for r in records}
    assert suggested == {
        "fs:read_json_config",
        "fs:list_directory",
        "time:get_current_time_tokyo",
        "git:summarize_recent_git_commits",
        "code:snippet",
    }
    run = await curation.latest_run(scope)
    assert run is not None
    assert (run.id, run.trigger, run.mode) == (answer["runId"], "manual", "suggest")
    assert run.suggestions == answer["suggestions"]
    assert run.applied == []


async def test_auto_applies_only_confidence_above_the_threshold_and_keeps_old_names_as_aliases(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:  # AC2
    clear = await capture(registry, scope, "read and parse JSON config file", ["filesystem:read"])
    twin = await capture(
        registry, scope, "read and parse JSON config files", ["filesystem:read"], code="return 2"
    )  # same name wanted: suffix _2, confidence exactly 0.8 → not applied
    vague = await capture(registry, scope, "", [])

    answer = await curation.curate(scope, CurateParams(mode="auto"))

    confidences = {item["id"]: item["confidence"] for item in answer["suggestions"]}
    assert confidences == {clear.fqdn: 1.0, twin.fqdn: 0.8, vague.fqdn: 0.55}
    assert answer["applied"] == [
        {
            "id": clear.fqdn,
            "fqdn": clear.fqdn,
            "oldName": clear.display_name,
            "newName": "fs:read_json_config",
        }
    ]
    assert {item["id"]: item["reason"] for item in answer["skipped"]} == {
        twin.fqdn: "confidence 0.8 is not above 0.8",
        vague.fqdn: "confidence 0.55 is not above 0.8",
    }
    now = await names(registry, scope)
    assert now == {
        clear.fqdn: "fs:read_json_config",
        twin.fqdn: twin.display_name,
        vague.fqdn: vague.display_name,
    }
    old = await registry.resolve(scope, clear.display_name)
    assert old.record.fqdn == clear.fqdn
    assert old.deprecated_alias is not None
    assert old.deprecated_alias["currentName"] == "fs:read_json_config"
    assert (await registry.resolve(scope, "mcp__fs__read_json_config")).record.fqdn == clear.fqdn


async def test_a_lower_threshold_setting_applies_more(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    record = await capture(registry, scope, "", [])
    curation = CurationService(registry, db, settings=CurationSettings(auto_threshold=0.5))

    answer = await curation.curate(scope, CurateParams(mode="auto"))

    assert [item["fqdn"] for item in answer["applied"]] == [record.fqdn]


async def test_a_name_already_used_gets_a_suffix_and_lower_confidence(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:  # AC9
    await capture(registry, scope, "x", [], name="fs:read_json_config", code="return 'named'")
    record = await capture(registry, scope, "read and parse JSON config file", ["filesystem:r"])

    answer = await curation.call(scope, {})

    (item,) = answer["suggestions"]
    assert item["id"] == record.fqdn
    assert item["suggestedName"] == "fs:read_json_config_2"
    assert item["confidence"] == 0.8  # uniqueness 1/2
    assert "'fs:read_json_config' is taken, hence the suffix _2" in item["reasoning"]


async def test_an_alias_in_use_counts_as_taken(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:
    named = await capture(registry, scope, "x", [], name="fs:read_json_config", code="return 1")
    await registry.rename(scope, named.fqdn, RenameChanges(new_name="fs:config_loader"))
    record = await capture(registry, scope, "read and parse JSON config file", ["filesystem:r"])

    answer = await curation.call(scope, {"filter": {"unnamed_only": True}})

    assert [(i["id"], i["suggestedName"]) for i in answer["suggestions"]] == [
        (record.fqdn, "fs:read_json_config_2")
    ]


async def test_two_capabilities_wanting_the_same_name_in_one_run_get_distinct_names(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:
    for index in range(3):
        await capture(
            registry, scope, "read the config", ["filesystem:read"], code=f"return {index}"
        )

    answer = await curation.curate(scope, CurateParams(mode="auto"))

    suggested = sorted(item["suggestedName"] for item in answer["suggestions"])
    assert suggested == ["fs:read_config", "fs:read_config_2", "fs:read_config_3"]
    assert [item["newName"] for item in answer["applied"]] == ["fs:read_config"]


async def test_apply_makes_good_renames_and_reports_each_bad_one(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:  # AC3
    first = await capture(registry, scope, "a", [], code="return 1")
    second = await capture(registry, scope, "b", [], code="return 2")
    third = await capture(registry, scope, "c", [], code="return 3")
    renames: list[dict[str, Any]] = [
        {"id": first.display_name, "name": "my-reader"},
        {"id": "unnamed_00000000", "name": "ghost"},
        {"id": second.fqdn, "name": "bad name!"},
        {"id": second.fqdn, "name": "my-reader"},
        {"id": third.id, "name": "code:third"},
        {"id": "x" * 5000, "name": "y" * 5000},
    ]

    answer = await curation.call(scope, {"mode": "apply", "renames": renames})

    assert answer["applied"] == [
        {"id": first.display_name, "fqdn": first.fqdn, "oldName": first.display_name,
         "newName": "my-reader"},
        {"id": third.id, "fqdn": third.fqdn, "oldName": third.display_name,
         "newName": "code:third"},
    ]  # fmt: skip
    codes = [(item["error"]["code"], item["name"]) for item in answer["skipped"]]
    assert codes == [
        ("NOT_FOUND", "ghost"),
        ("INVALID_NAME", "bad name!"),
        ("NAME_TAKEN", "my-reader"),
        ("NOT_FOUND", "y" * 100 + "…"),
    ]
    assert answer["skipped"][0]["reason"] == "Capability not found: unnamed_00000000"
    assert len(answer["skipped"][3]["id"]) <= 101
    assert answer["suggestions"] == []
    assert (await registry.resolve(scope, first.display_name)).record.display_name == "my-reader"
    assert (await names(registry, scope))[second.fqdn] == second.display_name
    run = await curation.latest_run(scope)
    assert run is not None
    assert (run.mode, len(run.applied)) == ("apply", 2)


async def test_min_usage_and_unnamed_only_filter_what_is_processed(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:  # AC4
    busy = await capture(registry, scope, "read the config", ["filesystem:r"], uses=3)
    await capture(registry, scope, "read the log", ["filesystem:r"], uses=1)
    named = await capture(registry, scope, "read the env", ["filesystem:r"], uses=5, name="env")

    filtered = await curation.call(scope, {"filter": {"unnamed_only": True, "min_usage": 3}})
    everything = await curation.call(scope, {"filter": {"unnamed_only": False}})
    auto = await curation.call(scope, {"mode": "auto", "filter": {"unnamed_only": False}})

    assert [item["id"] for item in filtered["suggestions"]] == [busy.fqdn]
    assert (filtered["considered"], filtered["matching"]) == (1, 1)
    assert everything["suggestions"][0]["id"] == named.fqdn  # most used first
    assert len(everything["suggestions"]) == 3
    assert named.fqdn not in {item["fqdn"] for item in auto["applied"]}
    skipped = {item["id"]: item["reason"] for item in auto["skipped"]}
    assert skipped[named.fqdn] == "already named: auto mode renames only unnamed capabilities"
    assert (await names(registry, scope))[named.fqdn] == "env"


async def test_the_number_processed_per_call_is_bounded(
    registry: CapabilityRegistry, db: Database, scope: Scope
) -> None:
    for index in range(5):
        await capture(registry, scope, f"task {index}", [], code=f"return {index}")
    curation = CurationService(registry, db, max_per_call=3)

    answer = await curation.call(scope, {"mode": "suggest"})

    assert (len(answer["suggestions"]), answer["considered"], answer["matching"]) == (3, 3, 5)
    assert answer["limit"] == 3


async def test_another_tenants_capabilities_are_neither_suggested_nor_renamed(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:
    theirs = await capture(
        registry, OTHER, "read the secrets", ["filesystem:r"], visibility="public"
    )
    private = await capture(
        registry, Scope(scope.org, scope.project, "mallory"), "private", [], visibility="private"
    )
    mine = await capture(registry, scope, "read the config", ["filesystem:r"])

    suggested = await curation.call(scope, {"mode": "auto"})
    applied = await curation.call(
        scope,
        {
            "mode": "apply",
            "renames": [
                {"id": theirs.fqdn, "name": "stolen"},
                {"id": theirs.display_name, "name": "stolen2"},
                {"id": theirs.id, "name": "stolen3"},
                {"id": private.fqdn, "name": "peeked"},
            ],
        },
    )

    assert [item["id"] for item in suggested["suggestions"]] == [mine.fqdn]
    assert applied["applied"] == []
    assert [item["error"]["code"] for item in applied["skipped"]] == ["NOT_FOUND"] * 4
    assert applied["skipped"][0]["reason"] == f"Capability not found: {theirs.fqdn}"
    assert (await names(registry, OTHER))[theirs.fqdn] == theirs.display_name
    assert await curation.latest_run(OTHER) is None  # runs are stored per org/project


@pytest.mark.parametrize(
    "arguments",
    [
        {"mode": "delete"},
        {"mode": "apply"},
        {"mode": "apply", "renames": "a=b"},
        {"mode": "apply", "renames": [{"id": 1, "name": "x"}]},
        {"mode": "apply", "renames": [{"id": "a", "name": ""}]},
        {"filter": {"min_usage": -1}},
        {"filter": {"min_usage": "3"}},
        {"filter": {"unnamed_only": "yes"}},
        {"filter": {"other": True}},
        {"extra": 1},
        ["suggest"],
    ],
)
async def test_malformed_arguments_are_invalid_input_and_store_nothing(
    curation: CurationService, scope: Scope, arguments: Any
) -> None:
    with pytest.raises(InvalidInput):
        await curation.call(scope, arguments)

    assert await curation.latest_run(scope) is None


async def test_an_apply_on_an_mcp_server_record_is_refused(
    registry: CapabilityRegistry, curation: CurationService, scope: Scope
) -> None:
    await registry.register_mcp_server(scope, "files", code_url="npx server-filesystem")

    answer = await curation.call(
        scope, {"mode": "apply", "renames": [{"id": "mcp:files", "name": "fs:files"}]}
    )

    assert answer["applied"] == []
    assert answer["skipped"][0]["error"]["code"] == "INVALID_INPUT"
    assert (await registry.resolve(scope, "mcp:files")).record.display_name == "mcp:files"


async def test_own_fqdn_lookup_by_unknown_reference_is_not_found(
    curation: CurationService, scope: Scope
) -> None:
    answer = await curation.call(
        scope, {"mode": "apply", "renames": [{"id": "acme.webapp.fs.x.abcd", "name": "a"}]}
    )

    assert (
        answer["skipped"][0]["error"]
        == NotFound("Capability not found: acme.webapp.fs.x.abcd").to_dict()
    )
