"""Hostile tag lists: a request's tags are counted before any is checked (red team)."""

from __future__ import annotations

import pytest

from pml.errors import InvalidInput
from pml.registry import naming
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.registry.tools import CapTools
from samples import make

pytestmark = pytest.mark.anyio


def _counting_secret_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checked: list[str] = []
    real = naming.holds_token

    def counting(text: str) -> bool:
        checked.append(text)
        return real(text)

    monkeypatch.setattr(naming, "holds_token", counting)
    return checked


async def test_rename_with_thousands_of_distinct_tags_is_refused_before_checking_them(
    registry: CapabilityRegistry,
    tools: CapTools,
    scope: Scope,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make(registry, scope, "return 1", name="victimless")
    checked = _counting_secret_checks(monkeypatch)
    hostile = [f"t{i}" for i in range(30_000)]  # ~300 KB of JSON; a 4 MiB body holds 450 000

    with pytest.raises(InvalidInput) as refused:
        await tools.call("cap_rename", scope, {"name": "victimless", "tags": hostile})

    assert "30000 given" in refused.value.message
    assert len(checked) <= naming.MAX_TAG_ITEMS  # was 30 000 checks and 450 million compares
    assert (await tools.call("cap_lookup", scope, {"name": "victimless"}))["fqdn"]


async def test_repeated_tags_within_the_bound_are_still_folded_into_one(
    registry: CapabilityRegistry, tools: CapTools, scope: Scope
) -> None:
    await make(registry, scope, "return 1", name="victimless")

    await tools.call(
        "cap_rename",
        scope,
        {"name": "victimless", "tags": ["io"] * naming.MAX_TAG_ITEMS},
    )

    whois = await tools.call("cap_lookup", scope, {"name": "victimless"})
    listed = await tools.call("cap_list", scope, {"tags": ["io"]})
    assert [item["fqdn"] for item in listed["items"]] == [whois["fqdn"]]


@pytest.mark.parametrize(
    "tags",
    [
        ["io"] * (naming.MAX_TAG_ITEMS + 1),
        [f"t{i}" for i in range(naming.MAX_TAG_ITEMS + 1)],
        [{"deep": ["x"] * 1000}] * (naming.MAX_TAG_ITEMS + 1),
    ],
)
def test_check_tags_refuses_a_list_over_the_bound_whatever_it_holds(tags: list[object]) -> None:
    with pytest.raises(InvalidInput) as refused:
        naming.check_tags(tags)

    assert f"{naming.MAX_TAG_ITEMS + 1} given" in refused.value.message
