"""Scope and visibility: what another tenant cannot see behaves exactly like a missing record."""

from __future__ import annotations

import pytest

from pml.errors import NotFound, PermissionDenied
from pml.registry.models import ListQuery
from pml.registry.scope import Scope, Visibility
from pml.registry.service import CapabilityDraft, CapabilityRegistry, RenameChanges

pytestmark = pytest.mark.anyio

OWNER = Scope("acme", "webapp", "erwan")
TEAMMATE = Scope("acme", "webapp", "lea")
SAME_ORG = Scope("acme", "billing", "max")
OTHER_ORG = Scope("globex", "webapp", "hank")

# visibility -> who may see it, in the order (owner, teammate, same org, other org)
MATRIX: dict[Visibility, tuple[bool, bool, bool, bool]] = {
    "private": (True, False, False, False),
    "project": (True, True, False, False),
    "org": (True, True, True, False),
    "public": (True, True, True, True),
}


async def _capability(registry: CapabilityRegistry, visibility: Visibility) -> tuple[str, str]:
    name = f"shared-{visibility}"
    record = (
        await registry.capture(
            OWNER,
            CapabilityDraft(code=f"return '{visibility}'", name=name, visibility=visibility),
            latency_ms=1,
        )
    ).record
    return name, record.fqdn


@pytest.mark.parametrize("visibility", list(MATRIX))
async def test_each_visibility_is_seen_by_exactly_its_audience(
    registry: CapabilityRegistry, visibility: Visibility
) -> None:
    _, fqdn = await _capability(registry, visibility)
    for viewer, may_see in zip(
        (OWNER, TEAMMATE, SAME_ORG, OTHER_ORG), MATRIX[visibility], strict=True
    ):
        by_fqdn_visible = await _visible(registry, viewer, fqdn)
        listed = await registry.list(viewer, ListQuery())
        assert by_fqdn_visible is may_see, (viewer, visibility)
        assert (fqdn in {item.fqdn for item in listed.items}) is may_see, (viewer, visibility)


async def _visible(registry: CapabilityRegistry, viewer: Scope, ref: str) -> bool:
    try:
        await registry.resolve(viewer, ref)
    except NotFound:
        return False
    return True


async def test_display_names_resolve_in_scope_first_then_public_elsewhere(
    registry: CapabilityRegistry,
) -> None:
    theirs = (
        await registry.capture(
            OTHER_ORG,
            CapabilityDraft(code="return 'theirs'", name="tool", visibility="public"),
            latency_ms=1,
        )
    ).record
    assert (await registry.resolve(OWNER, "tool")).record.fqdn == theirs.fqdn
    mine = (
        await registry.capture(
            OWNER, CapabilityDraft(code="return 'mine'", name="tool"), latency_ms=1
        )
    ).record
    assert (await registry.resolve(OWNER, "tool")).record.fqdn == mine.fqdn


async def test_hidden_and_missing_records_give_the_same_error(registry: CapabilityRegistry) -> None:
    name, fqdn = await _capability(registry, "project")
    errors: list[str] = []
    for ref in (fqdn, "acme.webapp.code.shared-project.ffff", name, "no-such-thing"):
        with pytest.raises(NotFound) as caught:
            await registry.resolve(OTHER_ORG, ref)
        errors.append(caught.value.message.replace(ref, "<ref>"))
    for ref in (fqdn, "acme.webapp.code.shared-project.ffff"):
        with pytest.raises(NotFound) as caught:
            await registry.whois(OTHER_ORG, ref)
        errors.append(caught.value.message.replace(ref, "<ref>"))
    assert set(errors) == {"Capability not found: <ref>"}


async def test_aliases_of_another_scope_do_not_resolve(registry: CapabilityRegistry) -> None:
    name, _ = await _capability(registry, "public")
    await registry.rename(OWNER, name, RenameChanges(new_name="renamed"))
    assert (await registry.resolve(OWNER, name)).via_alias == name
    with pytest.raises(NotFound):
        await registry.resolve(OTHER_ORG, name)


async def test_private_records_are_invisible_to_teammates_even_by_name(
    registry: CapabilityRegistry,
) -> None:
    name, _ = await _capability(registry, "private")
    with pytest.raises(NotFound):
        await registry.resolve(TEAMMATE, name)
    with pytest.raises(NotFound):
        await registry.rename(TEAMMATE, name, RenameChanges(description="mine now"))


async def test_a_visible_record_of_another_scope_cannot_be_changed(
    registry: CapabilityRegistry,
) -> None:
    name, fqdn = await _capability(registry, "public")
    with pytest.raises(PermissionDenied):
        await registry.rename(OTHER_ORG, fqdn, RenameChanges(new_name="stolen"))
    assert (await registry.resolve(OWNER, name)).record.display_name == name


async def test_listing_filters_apply_within_what_the_scope_sees(
    registry: CapabilityRegistry,
) -> None:
    for visibility in MATRIX:
        await _capability(registry, visibility)
    page = await registry.list(SAME_ORG, ListQuery(visibility="org"))
    assert [item.display_name for item in page.items] == ["shared-org"]
    assert page.total == 1
