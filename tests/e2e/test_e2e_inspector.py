"""The MCP Inspector CLI (a real third-party client, on Node 22) against ``pml serve``.

Over stdio the Inspector starts ``pml serve --stdio`` itself (the arguments after ``--``; the
Inspector has a ``--config`` option of its own); over HTTP it is given the ``/mcp`` URL and
the key in ``--header``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    META_TOOLS,
    PML,
    InspectorRun,
    NpmDeps,
    Upstream,
    create_key,
    pml_http,
    run_inspector,
    sqlite_url,
    write_config,
)

pytestmark = pytest.mark.e2e

ERAS = pytest.mark.parametrize("era", ["legacy", "modern"])


def inspect(deps: NpmDeps, tmp_path: Path, target: list[str], *args: str) -> InspectorRun:
    return run_inspector(deps, tmp_path / "home", "--format", "json", "-q", *args, "--", *target)


def stdio_target(tmp_path: Path, servers: dict[str, Upstream]) -> list[str]:
    config = write_config(
        tmp_path / "pml.toml", [servers["everything"]], database_url=sqlite_url(tmp_path)
    )
    return [str(PML), "--config", str(config), "serve", "--stdio"]


def tool_names(listing: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in listing["tools"]}


@ERAS
def test_inspector_lists_the_tools_of_pml_over_stdio(
    npm_deps: NpmDeps, tmp_path: Path, servers: dict[str, Upstream], era: str
) -> None:
    run = inspect(
        npm_deps,
        tmp_path,
        stdio_target(tmp_path, servers),
        "--protocol-era",
        era,
        "--method",
        "tools/list",
    )

    names = tool_names(run.result())
    assert names >= META_TOOLS
    assert {"everything__echo", "everything__get-sum"} <= names
    assert run.leftover == ()


@ERAS
def test_inspector_calls_cap_list_and_a_pass_through_tool_over_stdio(
    npm_deps: NpmDeps, tmp_path: Path, servers: dict[str, Upstream], era: str
) -> None:
    target = stdio_target(tmp_path, servers)
    era_args = ("--protocol-era", era)
    listed = inspect(
        npm_deps, tmp_path, target, *era_args, "--method", "tools/call", "--tool-name", "cap_list"
    )
    echoed = inspect(
        npm_deps,
        tmp_path,
        target,
        *era_args,
        "--method",
        "tools/call",
        "--tool-name",
        "everything__echo",
        "--tool-arg",
        "message=from the Inspector",
    )

    assert listed.result()["structuredContent"] == {"items": [], "total": 0}
    assert listed.result()["isError"] is False
    assert echoed.result()["content"] == [{"type": "text", "text": "Echo: from the Inspector"}]
    assert listed.leftover == echoed.leftover == ()


def test_inspector_lists_and_calls_tools_over_http_with_a_key(
    npm_deps: NpmDeps, tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    config = write_config(
        tmp_path / "pml.toml",
        [servers["time"], servers["everything"]],
        database_url=sqlite_url(tmp_path),
    )
    key = create_key(config, "acme", "web", "alice")["key"]
    with pml_http(config, tmp_path / "pml.log") as gateway:
        target = [gateway.mcp_url]
        auth = ("--stored-auth-only", "--header", f"Authorization: Bearer {key}")
        listed = inspect(npm_deps, tmp_path, target, *auth, "--method", "tools/list")
        called = inspect(
            npm_deps,
            tmp_path,
            target,
            *auth,
            "--method",
            "tools/call",
            "--tool-name",
            "cap_list",
        )
        refused = inspect(
            npm_deps,
            tmp_path,
            target,
            "--stored-auth-only",
            "--header",
            "Authorization: Bearer pml_wrong-key",
            "--method",
            "tools/list",
        )

    assert tool_names(listed.result()) >= META_TOOLS
    assert "everything__echo" in tool_names(listed.result())
    assert called.result()["structuredContent"] == {"items": [], "total": 0}
    # A 401 makes the Inspector want OAuth; --stored-auth-only turns that into this error.
    assert refused.error()["code"] == "auth_required"
    assert "UNAUTHORIZED" in refused.error()["message"]
