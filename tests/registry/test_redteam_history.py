"""``cap_history`` of a capability with many versions shows the newest ones only (red team:
versions accumulate without end and each carries a diff of up to twice its code, so one
answer of 1 000 versions of 90 KB code was ~250 MB built on the event loop)."""

from __future__ import annotations

import pytest

from pml import cpu_process
from pml.errors import PmlError
from pml.registry.scope import Scope
from pml.registry.service import CapabilityDraft, CapabilityRegistry
from pml.registry.tools import MAX_HISTORY_VERSIONS, CapTools
from pml.registry.versions import unified_diff
from samples import make

pytestmark = pytest.mark.anyio


async def _versions(registry: CapabilityRegistry, scope: Scope, count: int) -> None:
    await make(registry, scope, "return 1", name="hist")
    for version in range(2, count + 1):
        await registry.update_code(scope, "hist", CapabilityDraft(code=f"return {version}"))


async def test_history_of_many_versions_shows_the_newest_with_their_diffs(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    total = MAX_HISTORY_VERSIONS + 5
    await _versions(registry, scope, total)

    history = await tools.call("cap_history", scope, {"name": "hist"})

    shown = [entry["version"] for entry in history["versions"]]
    assert shown == list(range(total, total - MAX_HISTORY_VERSIONS, -1))
    assert history["truncated"] is True
    oldest = history["versions"][-1]  # still diffed against the version before it
    assert f"-return {oldest['version'] - 1}" in oldest["diff"]
    assert f"+return {oldest['version']}" in oldest["diff"]
    older = await tools.call("cap_lookup", scope, {"name": "hist@v1"})  # still reachable
    assert older["version"] == 1
    assert history["next_before"] == oldest["version"]


async def test_history_pages_to_the_oldest_version_with_next_before(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    total = 2 * MAX_HISTORY_VERSIONS + 3
    await _versions(registry, scope, total)

    seen: list[int] = []
    arguments: dict[str, object] = {"name": "hist"}
    for _ in range(5):  # bounded: three pages are expected
        page = await tools.call("cap_history", scope, arguments)
        seen += [entry["version"] for entry in page["versions"]]
        if "next_before" not in page:
            assert "truncated" not in page
            break
        assert page["truncated"] is True
        arguments = {"name": "hist", "before": page["next_before"]}
    assert seen == list(range(total, 0, -1))  # each version once, newest first
    last = await tools.call("cap_history", scope, {"name": "hist", "before": 2})
    assert [entry["version"] for entry in last["versions"]] == [1]
    assert last["versions"][0]["diff"].startswith("--- hist@v0")


@pytest.mark.parametrize("before", [0, 1, -5, "3", 3.0, True, None, 2**31, 10**30, [3], {"v": 3}])
async def test_a_bad_before_is_refused_and_changes_nothing(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope, before: object
) -> None:
    await _versions(registry, scope, 3)
    if before is None:  # the same as leaving it out
        page = await tools.call("cap_history", scope, {"name": "hist", "before": before})
        assert [entry["version"] for entry in page["versions"]] == [3, 2, 1]
        return
    with pytest.raises(PmlError) as refused:
        await tools.call("cap_history", scope, {"name": "hist", "before": before})
    assert refused.value.code == "INVALID_INPUT"
    assert "before" in str(refused.value)


async def test_before_past_the_newest_shows_the_newest(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await _versions(registry, scope, 3)
    page = await tools.call("cap_history", scope, {"name": "hist", "before": 2**31 - 1})
    assert [entry["version"] for entry in page["versions"]] == [3, 2, 1]


async def test_history_within_the_bound_is_whole_and_not_marked(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await _versions(registry, scope, MAX_HISTORY_VERSIONS)

    history = await tools.call("cap_history", scope, {"name": "hist"})

    assert [entry["version"] for entry in history["versions"]][-1] == 1
    assert len(history["versions"]) == MAX_HISTORY_VERSIONS
    assert history["versions"][-1]["diff"].startswith("--- hist@v0")
    assert "truncated" not in history


async def test_history_of_large_versions_is_diffed_by_the_child_process_with_the_same_diffs(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    def code(version: int) -> str:  # ~22 KB, every other line changing between versions
        return "\n".join(f"a{i} = {i if i % 2 else version}" for i in range(2_000)) + "\nreturn 1"

    draft = CapabilityDraft(code=code(1), intent="a big one", name="big")
    assert (await registry.capture(scope, draft, latency_ms=5.0)).created
    for version in (2, 3, 4):
        await registry.update_code(scope, "big", CapabilityDraft(code=code(version)))
    answered = cpu_process.PROCESS.answered

    history = await tools.call("cap_history", scope, {"name": "big"})

    assert cpu_process.PROCESS.answered == answered + 1  # one round trip for all the diffs
    diffs = [entry["diff"] for entry in history["versions"]]
    expected = [unified_diff(code(v - 1), code(v), f"big@v{v - 1}", f"big@v{v}") for v in (4, 3, 2)]
    assert diffs[:3] == expected
    assert diffs[3] == unified_diff("", code(1), "big@v0", "big@v1")
