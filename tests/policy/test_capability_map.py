"""The capability map: config patterns first, built-in defaults for the reference servers,
``unknown`` for everything else."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mcp_server_git.server import GitTools
from mcp_server_time.server import TimeTools

from pml.errors import ConfigError, InvalidInput
from pml.policy.capability_map import CapabilityMap
from pml.policy.model import CAPABILITIES, PermissionCapability
from pml.sections import PolicySettings

REPO = Path(__file__).resolve().parents[2]
# tools/list of the real reference servers, captured from the pinned packages
REFERENCE_TOOLS = REPO / "benchmarks" / "data" / "reference_tools.json"

EXPECTED: dict[str, dict[str, PermissionCapability]] = {
    "filesystem": {
        "read_file": "file_read",
        "read_text_file": "file_read",
        "read_media_file": "file_read",
        "read_multiple_files": "file_read",
        "list_directory": "file_read",
        "list_directory_with_sizes": "file_read",
        "directory_tree": "file_read",
        "search_files": "file_read",
        "get_file_info": "file_read",
        "list_allowed_directories": "file_read",
        "write_file": "file_write",
        "edit_file": "file_write",
        "create_directory": "file_write",
        "move_file": "file_write",
    },
    "git": {
        "git_status": "file_read",
        "git_diff": "file_read",
        "git_diff_staged": "file_read",
        "git_diff_unstaged": "file_read",
        "git_log": "file_read",
        "git_show": "file_read",
        "git_branch": "file_read",
        "git_commit": "file_write",
        "git_add": "file_write",
        "git_reset": "file_write",
        "git_create_branch": "file_write",
        "git_checkout": "file_write",
    },
    "memory": {
        "read_graph": "memory_read",
        "search_nodes": "memory_read",
        "open_nodes": "memory_read",
        "create_entities": "memory_write",
        "create_relations": "memory_write",
        "add_observations": "memory_write",
        "delete_entities": "memory_write",
        "delete_observations": "memory_write",
        "delete_relations": "memory_write",
    },
    "fetch": {"fetch": "network"},
    "time": {"get_current_time": "time", "convert_time": "time"},
    "everything": {
        "echo": "compute",
        "get-annotated-message": "compute",
        "get-env": "system_execute",
        "get-resource-links": "compute",
        "get-resource-reference": "compute",
        "get-structured-content": "compute",
        "get-sum": "compute",
        "get-tiny-image": "compute",
        "gzip-file-as-resource": "network",
        "simulate-research-query": "compute",
        "toggle-simulated-logging": "compute",
        "toggle-subscriber-updates": "compute",
        "trigger-long-running-operation": "compute",
    },
}


def _pairs() -> list[tuple[str, str, PermissionCapability]]:
    return [(s, t, cap) for s, tools in EXPECTED.items() for t, cap in tools.items()]


@pytest.mark.parametrize(("server", "tool", "capability"), _pairs())
def test_reference_tools_map_to_their_capability(
    server: str, tool: str, capability: PermissionCapability
) -> None:
    assert CapabilityMap().capability_of(server, tool) == capability


def test_every_tool_the_reference_servers_list_is_mapped() -> None:
    listed = json.loads(REFERENCE_TOOLS.read_text())["servers"]
    cmap = CapabilityMap()
    names = {server: {tool["name"] for tool in tools} for server, tools in listed.items()}
    assert names == {server: set(tools) for server, tools in EXPECTED.items()}
    for server, tools in names.items():
        for tool in tools:
            assert cmap.capability_of(server, tool) != "unknown", f"{server}:{tool}"


def test_installed_git_and_time_servers_tool_names_are_all_mapped() -> None:
    cmap = CapabilityMap()
    assert {cmap.capability_of("git", tool.value) for tool in GitTools} == {
        "file_read",
        "file_write",
    }
    assert {cmap.capability_of("time", tool.value) for tool in TimeTools} == {"time"}


@pytest.mark.parametrize(
    ("server", "tool", "capability"),
    [
        ("fs", "read_text_file", "file_read"),
        ("fs", "write_file", "file_write"),
        ("server-filesystem", "move_file", "file_write"),
        ("mcp-server-git", "git_diff_unstaged", "file_read"),
        ("git", "git_init", "file_write"),
        ("mcp-server-time", "convert_time", "time"),
        ("mcp-server-fetch", "fetch", "network"),
        ("everything", "printEnv", "system_execute"),
        ("everything", "add", "compute"),
        ("everything", "longRunningOperation", "compute"),
        ("everything", "sampleLLM", "compute"),
        ("sequential-thinking", "sequentialthinking", "compute"),
        ("shell", "run_command", "system_execute"),
        ("terminal", "anything_at_all", "system_execute"),
        ("commands", "run_process", "system_execute"),
        ("sqlite", "read_query", "file_read"),
        ("sqlite", "list_tables", "file_read"),
        ("sqlite", "describe_table", "file_read"),
        ("sqlite", "write_query", "file_write"),
        ("sqlite", "create_table", "file_write"),
        ("brave-search", "brave_local_search", "web_search"),
        ("acme", "brave_web_search", "web_search"),
        ("acme", "web_search_exa", "web_search"),
        ("acme", "web-search", "web_search"),
        ("puppeteer", "puppeteer_navigate", "browser"),
        ("playwright", "browser_click", "browser"),
        ("pml", "pml_discover", "meta"),
        ("pml", "pml_execute", "meta"),
        ("pml", "cap_list", "meta"),
        ("pml", "cap_rename", "meta"),
    ],
)
def test_short_names_and_well_known_servers(
    server: str, tool: str, capability: PermissionCapability
) -> None:
    assert CapabilityMap().capability_of(server, tool) == capability


@pytest.mark.parametrize(
    ("server", "tool"),
    [
        ("acme", "read_file"),  # an unknown server's tool names are not guessed from
        ("acme", "run_shell"),
        ("filesystem", "delete_file"),  # a tool a newer release could add
        ("everything", "file-operations"),
        ("memory", "wipe_graph"),
        ("Filesystem", "read_file"),  # server names are case-sensitive
        ("filesystem", "READ_FILE"),
        ("pml", "other"),
        ("acme", "websearch"),
        ("", ""),
    ],
)
def test_unmapped_tools_are_unknown(server: str, tool: str) -> None:
    assert CapabilityMap().capability_of(server, tool) == "unknown"


def test_config_patterns_come_first_in_table_order() -> None:
    cmap = CapabilityMap(
        {
            "acme:read_*": "file_read",
            "acme:*": "system_execute",
            "filesystem:read_*": "unknown",  # overrides a built-in default
            "*:*_search": "web_search",
        }
    )
    assert cmap.capability_of("acme", "read_report") == "file_read"
    assert cmap.capability_of("acme", "reindex") == "system_execute"
    assert cmap.capability_of("acme", "local_search") == "system_execute"  # acme:* came first
    assert cmap.capability_of("filesystem", "read_text_file") == "unknown"
    assert cmap.capability_of("filesystem", "write_file") == "file_write"  # default still
    assert cmap.capability_of("docs", "full_text_search") == "web_search"


def test_config_globs_are_fnmatch_style_and_case_sensitive() -> None:
    cmap = CapabilityMap({"db?:q[0-9]": "file_read", "Acme:*": "compute"})
    assert cmap.capability_of("db1", "q7") == "file_read"
    assert cmap.capability_of("db12", "q7") == "unknown"
    assert cmap.capability_of("db1", "qx") == "unknown"
    assert cmap.capability_of("Acme", "x") == "compute"
    assert cmap.capability_of("acme", "x") == "unknown"


def test_from_settings_reads_the_policy_capabilities_table() -> None:
    policy = PolicySettings.model_validate({"capabilities": {"crm:export_*": "file_write"}})
    cmap = CapabilityMap.from_settings(policy)
    assert cmap.capability_of("crm", "export_csv") == "file_write"
    assert cmap.describe()[0] == {
        "pattern": "crm:export_*",
        "capability": "file_write",
        "source": "config",
    }


@pytest.mark.parametrize(
    "key", ["fsread", ":read_file", "fs:", ":", "a:b:c", "", "fs::read", "\u202efs:x:y"]
)
def test_patterns_not_server_colon_tool_are_config_errors(key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        CapabilityMap({key: "file_read"})
    assert f'"{key}"' in raised.value.message
    assert raised.value.data["key"] == key


def test_a_non_string_pattern_or_unknown_capability_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        CapabilityMap({42: "file_read"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError) as raised:
        CapabilityMap({"fs:x": "root"})  # type: ignore[dict-item]
    assert "root" in raised.value.message


def test_a_huge_pattern_is_named_shortened_in_the_error() -> None:
    key = "x" * 1_000_000
    with pytest.raises(ConfigError) as raised:
        CapabilityMap({key: "file_read"})
    assert len(raised.value.message) < 1000


@pytest.mark.parametrize("bad", [None, 42, b"filesystem", ["fs"]])
def test_non_string_names_are_invalid_input(bad: object) -> None:
    cmap = CapabilityMap()
    with pytest.raises(InvalidInput):
        cmap.capability_of(bad, "read_file")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        cmap.capability_of("filesystem", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tool",
    [
        "read_file; rm -rf /",
        "read_file\n",
        "read_file\u200b",
        "\u202eelif_daer",
        "read_file' OR '1'='1",
        "ｒｅａｄ_ｆｉｌｅ",  # full-width letters are not the same name
    ],
)
def test_lookalike_and_injected_tool_names_are_unknown(tool: str) -> None:
    assert CapabilityMap().capability_of("filesystem", tool) == "unknown"


def test_a_one_megabyte_name_is_unknown_quickly_and_not_cached() -> None:
    cmap = CapabilityMap({"*:*a*b*c*d*e*": "compute"})
    tool = "a" * 1_000_000
    started = time.perf_counter()
    assert cmap.capability_of("acme", tool) == "unknown"
    assert cmap.capability_of("filesystem", tool) == "unknown"
    assert time.perf_counter() - started < 2.0
    assert cmap.cached == 0


def test_answers_are_cached_per_server_and_tool_within_a_bound() -> None:
    cmap = CapabilityMap(cache_size=3)
    for _ in range(3):
        assert cmap.capability_of("filesystem", "read_file") == "file_read"
    assert cmap.cached == 1
    for index in range(10):
        assert cmap.capability_of("acme", f"tool_{index}") == "unknown"
    assert cmap.cached == 3
    # evicted entries are computed again, with the same answer
    assert cmap.capability_of("filesystem", "read_file") == "file_read"
    assert CapabilityMap(cache_size=0).capability_of("fs", "write_file") == "file_write"


def test_tool_references_in_every_form_are_mapped() -> None:
    cmap = CapabilityMap()
    assert cmap.capability_of_ref("filesystem:write_file") == "file_write"
    assert cmap.capability_of_ref("memory__read_graph") == "memory_read"
    assert cmap.capability_of_ref("no separator") == "unknown"
    assert cmap.capability_of_ref(":") == "unknown"


def test_describe_lists_config_first_then_every_default() -> None:
    rows = CapabilityMap({"acme:*": "compute"}).describe()
    assert rows[0] == {"pattern": "acme:*", "capability": "compute", "source": "config"}
    assert all(row["source"] == "default" for row in rows[1:])
    patterns = {row["pattern"]: row["capability"] for row in rows}
    assert patterns["filesystem:write_file"] == "file_write"
    assert patterns["fs:read_text_file"] == "file_read"
    assert patterns["git:git_diff*"] == "file_read"
    assert patterns["*:*web_search*"] == "web_search"
    assert {row["capability"] for row in rows} <= set(CAPABILITIES)
    # every described pattern is one a config key could be
    for row in rows:
        CapabilityMap({row["pattern"]: "compute"})


def test_fingerprint_is_stable_and_follows_the_effective_mapping() -> None:
    base = CapabilityMap().fingerprint()
    assert base == CapabilityMap().fingerprint()
    assert len(base) == 16
    int(base, 16)
    one = CapabilityMap({"a:*": "compute", "b:*": "time"}).fingerprint()
    assert one != base
    assert one == CapabilityMap({"a:*": "compute", "b:*": "time"}).fingerprint()
    assert one != CapabilityMap({"b:*": "time", "a:*": "compute"}).fingerprint()  # order
    assert one != CapabilityMap({"a:*": "compute", "b:*": "network"}).fingerprint()
