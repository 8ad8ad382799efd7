"""Routing inheritance (SPEC §8)."""

from __future__ import annotations

from typing import Any

import pytest

from pml.errors import InvalidInput
from pml.registry.routing import Routing, resolve_routing, server_routing

CLOUD = ["tavily", "memory", "github*"]


@pytest.mark.parametrize(
    ("server", "routing"),
    [
        ("tavily", "cloud"),
        ("memory", "cloud"),
        ("github-enterprise", "cloud"),
        ("filesystem", "local"),
        ("Tavily", "local"),
        ("tavily2", "local"),
        ("", "local"),
        ("x" * 10_000, "local"),
    ],
)
def test_a_server_is_cloud_only_when_a_cloud_pattern_names_it(server: str, routing: str) -> None:
    assert server_routing(server, CLOUD) == routing


def test_a_local_pattern_overrides_a_cloud_pattern() -> None:
    assert server_routing("github-internal", CLOUD, ["*-internal"]) == "local"
    assert server_routing("github-public", CLOUD, ["*-internal"]) == "cloud"


def test_no_cloud_patterns_means_every_server_is_local() -> None:
    assert server_routing("tavily", []) == "local"


def test_glob_metacharacters_in_a_server_name_do_not_match_by_accident() -> None:
    assert server_routing("*", ["tavily"]) == "local"
    assert server_routing("[t]avily", ["tavily"]) == "local"


def test_any_local_tool_makes_the_code_local() -> None:
    tools = ["tavily:search", "filesystem:read_file", "memory:store"]
    assert resolve_routing(tools, cloud_patterns=CLOUD) == "local"


def test_only_cloud_tools_make_the_code_cloud() -> None:
    tools = ["tavily:search", "memory.store", "github__create_issue"]
    assert resolve_routing(tools, cloud_patterns=CLOUD) == "cloud"


def test_no_tools_means_cloud() -> None:
    assert resolve_routing([], cloud_patterns=[]) == "cloud"


@pytest.mark.parametrize("explicit", ["local", "cloud"])
def test_an_explicit_routing_wins(explicit: Routing) -> None:
    assert resolve_routing(["filesystem:read"], cloud_patterns=[], explicit=explicit) == explicit
    assert resolve_routing(["tavily:search"], cloud_patterns=CLOUD, explicit=explicit) == explicit


@pytest.mark.parametrize("explicit", ["Cloud", "", "remote", 1])
def test_an_invalid_explicit_routing_is_invalid_input(explicit: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        resolve_routing([], cloud_patterns=[], explicit=explicit)
    assert info.value.data == {"field": "routing"}


def test_a_used_capability_contributes_its_own_routing() -> None:
    fqdn = "local.default.api.fetch.a7f3"
    known: dict[str, Routing] = {fqdn: "cloud", "mcp__data__transform": "local"}
    assert resolve_routing([fqdn], cloud_patterns=[], capability_routing=known) == "cloud"
    assert (
        resolve_routing(
            [fqdn, "mcp__data__transform"], cloud_patterns=["data"], capability_routing=known
        )
        == "local"
    )


def test_a_cloud_capability_does_not_take_its_namespace_routing() -> None:
    known: dict[str, Routing] = {"mcp__fs__read_json": "cloud"}
    tools = ["mcp__fs__read_json", "tavily:search"]
    assert resolve_routing(tools, cloud_patterns=CLOUD, capability_routing=known) == "cloud"


def test_an_unknown_capability_is_local() -> None:
    tools = ["tavily:search", "acme.web.api.fetch.a7f3"]
    assert resolve_routing(tools, cloud_patterns=[*CLOUD, "api"]) == "local"
    assert resolve_routing(["mcp__tavily__search"], cloud_patterns=CLOUD) == "local"


@pytest.mark.parametrize(
    "ref", ["read_file", "", ":search", "tavily:", "'; DROP TABLE x; --", "x" * 10_000]
)
def test_a_tool_reference_without_a_server_is_local(ref: str) -> None:
    assert resolve_routing(["tavily:search", ref], cloud_patterns=CLOUD) == "local"


@pytest.mark.parametrize("ref", [None, 42, ["tavily:search"]])
def test_a_non_string_tool_reference_is_local(ref: Any) -> None:
    assert resolve_routing(["tavily:search", ref], cloud_patterns=CLOUD) == "local"


def test_cloud_patterns_match_the_server_not_the_whole_reference() -> None:
    assert resolve_routing(["tavily:search"], cloud_patterns=["tavily:*"]) == "local"
    assert resolve_routing(["tavily:search"], cloud_patterns=["tav*"]) == "cloud"
