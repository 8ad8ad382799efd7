"""The policy gate end to end (SPEC §10): ``pml serve --stdio`` with the real filesystem
server, a real MCP client, and the ``pml perms`` / ``pml audit`` commands on the same database.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clisupport import on_terminal
from e2e.support import (
    Upstream,
    error_of,
    pml_cli,
    pml_stdio,
    result_json,
    sqlite_url,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

READ_THEN_WRITE = """
def text(value):
    return value["content"] if isinstance(value, dict) else value

note = text(await mcp.filesystem.read_text_file(path=args["src"]))
listing = text(await mcp.filesystem.list_directory(path=args["dir"]))
await mcp.filesystem.write_file(path=args["dst"], content=note.upper())
return {"copied": len(note), "entries": listing.count("[FILE]")}
"""


def _config(tmp_path: Path, servers: dict[str, Upstream], **extra: Any) -> Path:
    return write_config(
        tmp_path / "pml.toml",
        [servers["filesystem"]],
        database_url=sqlite_url(tmp_path),
        expose_upstream=True,
        extra=extra,
    )


def _audit(config: Path) -> list[dict[str, Any]]:
    lines = pml_cli(config, "audit", "tail", "--json", "--limit", "1000").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _args(files: Path) -> dict[str, str]:
    return {"src": str(files / "note.txt"), "dir": str(files), "dst": str(files / "copy.txt")}


async def test_a_write_under_a_read_intent_is_refused_before_anything_runs(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    files = tmp_path / "files"
    config = _config(tmp_path, servers)
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        refused = await gw.client.call_tool(
            "pml_execute",
            {"intent": "read the note file", "code": READ_THEN_WRITE, "args": _args(files)},
        )
        direct = await gw.client.call_tool(
            "filesystem__write_file", {"path": str(files / "direct.txt"), "content": "x"}
        )
    assert refused.is_error is True
    error = error_of(refused)
    assert error["code"] == "POLICY_DENIED"
    assert error["tool"] == "filesystem:write_file"
    assert "file_task" in error["message"]
    assert "file_write" in error["message"]
    assert not (files / "copy.txt").exists()
    assert direct.is_error is True  # pass-through: no intent, read-only fallback
    assert error_of(direct)["code"] == "POLICY_DENIED"
    assert not (files / "direct.txt").exists()
    events = _audit(config)
    denied = [e for e in events if e["event"] == "POLICY_DENIED"]
    assert {e["details"]["stage"] for e in denied} == {"static", "call"}
    assert all(e["decided_by"] for e in denied)
    # nothing was sent: no tool call started for the refused snippet
    assert not [e for e in events if e["event"] == "TOOL_CALL_START"]


async def test_an_ask_pauses_and_approving_completes_the_run_with_each_call_sent_once(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    """A client without elicitation: its own approval writes nothing; a person's
    ``pml approvals approve`` in a terminal does, and the agent's resume sends it once."""
    files = tmp_path / "files"
    config = _config(tmp_path, servers)
    request = {"intent": "copy the note to a new file", "code": READ_THEN_WRITE}
    resume = {
        "intent": "approve",
        "continue_workflow": {"workflow_id": "", "approved": True, "grant": "always"},
    }
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        paused = result_json(
            await gw.client.call_tool("pml_execute", {**request, "args": _args(files)})
        )
        assert paused["status"] == "approval_required", paused
        assert not (files / "copy.txt").exists()
        [approval] = paused["approvals"]
        assert approval["tool"] == "filesystem:write_file"
        assert approval["capability"] == "file_write"
        assert approval["arguments"][0] == {
            "name": "path",
            "value": str(files / "copy.txt"),
            "bytes": len(str(files / "copy.txt").encode()),
            "truncated": False,
            "target": True,
        }
        resume["continue_workflow"]["workflow_id"] = paused["workflowId"]  # type: ignore[index]
        own = result_json(await gw.client.call_tool("pml_execute", resume))
        assert own["status"] == "approval_required"
        assert own["pending"] is True
        assert not (files / "copy.txt").exists()
        shown = pml_cli(config, "approvals", "show", paused["workflowId"])
        assert shown.index("copy.txt") < shown.index("content")
        env = {**os.environ, "PML_CONFIG": str(config)}
        code, screen = on_terminal(
            ["approvals", "approve", paused["workflowId"]], env, config.parent, "y"
        )
        assert code == 0, screen
        done = await gw.client.call_tool("pml_execute", resume)
        again = await gw.client.call_tool("pml_execute", resume)
    answer = result_json(done)
    assert done.is_error is False, answer
    assert answer["status"] == "success"
    assert answer["result"] == {"copied": len("PML end-to-end note\n"), "entries": 1}
    assert (files / "copy.txt").read_text() == "PML END-TO-END NOTE\n"
    assert answer["toolsUsed"] == [
        "filesystem:read_text_file",
        "filesystem:list_directory",
        "filesystem:write_file",
    ]
    assert again.is_error is True
    assert error_of(again)["code"] == "NOT_FOUND"
    events = _audit(config)
    started = [e["details"]["tool"] for e in events if e["event"] == "TOOL_CALL_START"]
    assert sorted(started) == sorted(answer["toolsUsed"])  # each call sent exactly once
    replayed = [
        e["details"]["tool"]
        for e in events
        if e["event"] == "TOOL_CALL_END" and e["details"]["replayed"]
    ]
    assert sorted(replayed) == ["filesystem:list_directory", "filesystem:read_text_file"]
    granted = [e for e in events if e["event"] == "PERMISSION_GRANTED"]
    assert len(granted) == 1
    assert granted[0]["decided_by"] == f"user:{getpass.getuser()}"  # the person at the terminal
    assert granted[0]["details"]["max_uses"] == 1  # the person's choice (once), not the agent's
    decided = [e for e in events if e["event"] == "APPROVAL_DECIDED"]
    assert [e["decided_by"] for e in decided] == [f"user:{getpass.getuser()}"]
    checks = [e for e in events if e["event"] == "PERMISSION_CHECK"]
    assert any(c["decided_by"].startswith("grant:") for c in checks)
    assert any(c["decided_by"] == "default:ask:file_write" for c in checks)
    assert any(e["event"] == "CAPABILITY_CREATED" for e in events)


async def test_a_refused_approval_captures_nothing_and_a_revoked_grant_stops_the_next_call(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    files = tmp_path / "files"
    config = _config(tmp_path, servers)
    request = {"intent": "copy the note to a new file", "code": READ_THEN_WRITE}
    async with pml_stdio(config, tmp_path / "pml.log") as gw:
        paused = result_json(
            await gw.client.call_tool("pml_execute", {**request, "args": _args(files)})
        )
        refused = await gw.client.call_tool(
            "pml_execute",
            {
                "intent": "no",
                "continue_workflow": {"workflow_id": paused["workflowId"], "approved": False},
            },
        )
        assert refused.is_error is True
        assert error_of(refused)["code"] == "PERMISSION_DENIED"
        listed = result_json(await gw.client.call_tool("cap_list", {}))
        assert listed["total"] == 0  # nothing captured
        grant = json.loads(
            pml_cli(
                config,
                "perms",
                "grant",
                "file_write",
                "--tool",
                "filesystem:write_file",
                "--path-prefix",
                str(files),
                "--ttl",
                "3600",
                "--user",
                "e2e",
                "--json",
            )
        )
        ran = result_json(
            await gw.client.call_tool("pml_execute", {**request, "args": _args(files)})
        )
        assert ran["status"] == "success", ran
        pml_cli(config, "perms", "revoke", grant["id"])
        stopped = result_json(
            await gw.client.call_tool(
                "pml_execute", {**request, "args": {**_args(files), "dst": str(files / "b.txt")}}
            )
        )
    assert stopped["status"] == "approval_required"
    assert not (files / "b.txt").exists()
    events = _audit(config)
    assert any(e["event"] == "PERMISSION_REVOKED" for e in events)
    assert any(e["event"] == "PERMISSION_DENIED" and e["decided_by"] == "user:e2e" for e in events)
