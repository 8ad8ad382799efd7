"""``pml agent`` at a real terminal (a pseudo-terminal it controls): the person approves,
consents and cancels by typing; the model never answers for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.scripted_llm import ScriptedLlm
from e2e.agent_support import AgentTerminal, agent_config, audit_rows, no_router
from e2e.support import Upstream, pml_cli

pytestmark = [pytest.mark.e2e]

PROMPT = b"you> "
CARD = "5500 0000 0000 0004"


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def memories(config: Path) -> list[dict[str, Any]]:
    return json.loads(pml_cli(config, "memory", "list", "--json"))["items"]


def test_approvals_are_asked_at_the_terminal_once_and_deny(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    files = tmp_path / "files"
    written = files / "notes.txt"
    refused = files / "other.txt"
    script = [
        call("filesystem__write_file", {"path": str(written), "content": "hello"}),
        {"content": "Written."},
        call("filesystem__write_file", {"path": str(refused), "content": "nope"}),
        {"content": "Not written."},
    ]
    with ScriptedLlm(script, router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "filesystem")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            mark = term.send(f"write hello into {written}")
            shown = term.expect(b"[d]eny: ", after=mark)
            assert str(written) in term.text[mark:shown] or "notes.txt" in term.text[mark:]
            term.send("o")
            mark = term.expect(PROMPT, after=shown)
            term.send(f"write nope into {refused}")
            shown = term.expect(b"[d]eny: ", after=mark)
            term.send("d")
            term.expect(PROMPT, after=shown)
            term.send("/exit")
            code = term.wait()

    assert code == 0, term.text[-2000:]
    assert written.read_text() == "hello"
    assert not refused.exists()
    rows = audit_rows(config)
    granted = [r for r in rows if r["event"] == "PERMISSION_GRANTED"]
    assert [r["decided_by"] for r in granted] == ["terminal:pml agent"]
    denied = [r for r in rows if r["event"] == "PERMISSION_DENIED"]
    assert any(r["decided_by"] == "terminal:pml agent" for r in denied)


def test_a_sensitive_memory_waits_for_consent_typed_at_the_terminal(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    script = [{"content": "I will not keep it."}, {"content": "Kept."}]
    with ScriptedLlm(script, router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "time")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            mark = term.send(f"remember my card number is {CARD}")
            shown = term.expect(b"[y/N]: ", after=mark)
            assert "sensitive" in term.text[mark:]
            term.send("n")
            mark = term.expect(PROMPT, after=shown)
            refused = memories(config)
            term.send(f"remember my card number is {CARD}")
            shown = term.expect(b"[y/N]: ", after=mark)
            term.send("y")
            term.expect(PROMPT, after=shown)
            term.send("/exit")
            assert term.wait() == 0

    assert refused == []
    kept = memories(config)
    assert [(m["sensitivity"], CARD in m["text"]) for m in kept] == [("high", True)]


def test_ctrl_c_cancels_the_turn_and_leaves_no_tool_call_running(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    slow = call("everything__trigger-long-running-operation", {"duration": 60, "steps": 60})
    with ScriptedLlm([slow, {"content": "after"}], router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "everything", "time")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            mark = term.send("what time is it in Tokyo")
            mark = term.expect(b"trigger-long-running-operation", after=mark)
            term.interrupt()
            mark = term.expect(b"(turn cancelled)", after=mark)
            term.expect(PROMPT, after=mark)
            term.send("/exit")
            assert term.wait() == 0

    rows = audit_rows(config)
    starts = [r for r in rows if r["event"] == "TOOL_CALL_START"]
    ends = [r for r in rows if r["event"] == "TOOL_CALL_END"]
    assert len(starts) == len(ends) == 1
    assert ends[0]["details"]["success"] is False
    records = [r["details"] for r in rows if r["event"] == "PIPELINE_RECORD"]
    assert [r["outcome"] for r in records] == ["cancelled"]


def test_ctrl_c_at_the_prompt_ends_the_conversation(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    with ScriptedLlm([], router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "time")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            term.interrupt()
            assert term.wait() == 0
            requests = list(llm.requests)
    assert requests == []


def test_an_unclear_request_asks_one_question_and_the_answer_decides_the_tools(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    with ScriptedLlm([{"content": "Here."}], router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "filesystem")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            mark = term.send("zorp the blarg")
            shown = term.expect(b"(Enter: read-only): ", after=mark)
            question = term.text[mark:shown]
            assert "not sure" in question
            assert "6) read, list or search my files" in question
            term.send("6")
            term.expect(PROMPT, after=shown)
            term.send("/exit")
            assert term.wait() == 0
            requests = list(llm.requests)

    names = [tool["function"]["name"] for tool in requests[0]["tools"]]
    assert "filesystem__read_text_file" in names
    assert "filesystem__write_file" not in names
    rows = audit_rows(config)
    [asked] = [r for r in rows if r["event"] == "AGENT_CLARIFICATION"]
    assert asked["decided_by"] == "person:clarified"
    assert asked["details"]["intent"] == "file_task"
    routes = [r["decided_by"] for r in rows if r["event"] == "ROUTER_OUTPUT"]
    assert routes == ["fallback", "person:clarified"]


def test_a_withheld_tool_can_be_allowed_only_by_the_person_s_answer(
    tmp_path: Path, servers: dict[str, Upstream]
) -> None:
    target = tmp_path / "files" / "clock.txt"
    write = call("filesystem__write_file", {"path": str(target), "content": "21:00"})
    with ScriptedLlm([write, write, {"content": "Saved."}], router=no_router) as llm:
        config = agent_config(tmp_path, servers, llm.base_url, "filesystem", "time")
        with AgentTerminal(config) as term:
            term.expect(PROMPT)
            mark = term.send("what time is it in Tokyo")
            shown = term.expect(b"(Enter: read-only): ", after=mark)
            question = term.text[mark:shown]
            assert "does not allow" in question
            assert "1) create, change or delete my files" in question
            term.send("1")
            shown = term.expect(b"[d]eny: ", after=shown)
            term.send("o")
            term.expect(PROMPT, after=shown)
            term.send("/exit")
            assert term.wait() == 0
            requests = list(llm.requests)

    assert target.read_text() == "21:00"
    first = [tool["function"]["name"] for tool in requests[0]["tools"]]
    second = [tool["function"]["name"] for tool in requests[1]["tools"]]
    assert "filesystem__write_file" not in first
    assert "filesystem__write_file" in second
