"""``pml audit show REQUEST_ID`` against one SQLite file: the record as JSON and as text,
unknown and hostile ids, other scopes, and stored text that must not reach the terminal raw.

Events are written with ``AuditRepository`` as a running gateway's ``AuditLog`` leaves them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli, sub_app
from pml.cli import audit_cmd
from pml.storage.audit_repo import AuditEntry, AuditRepository
from pml.storage.database import Database
from pml.storage.tables import audit_events

app = sub_app(audit_cmd.register)
AT = datetime(2025, 6, 1, 12, 30, tzinfo=UTC)


def entry(index: int, event: str, details: dict[str, Any], **fields: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "ts": AT + timedelta(milliseconds=250 * index),
        "event": event,
        "org": "local",
        "project": "default",
        "details": details,
        "actor": "erwan",
        "request_id": "4f2a9c01d3e5b7a9",
        "decided_by": None,
    }
    values.update(fields)
    return AuditEntry(**values)


RUN = [
    entry(
        0,
        "ROUTER_OUTPUT",
        {
            "intent": "lookup_search",
            "needs": ["time"],
            "confidence": 0.9,
            "decided_by": "heuristic:time",
            "source": "pml_execute",
        },
        decided_by="heuristic:time",
    ),
    entry(
        1,
        "POLICY_DECISION",
        {"rule": "policy:lookup_search", "allowed": ["time"], "forbidden": ["file_write"]},
        decided_by="policy:lookup_search",
    ),
    entry(
        2,
        "PERMISSION_CHECK",
        {"tool": "time:get_current_time", "outcome": "allow"},
        decided_by="default:allow:time",
    ),
    entry(3, "TOOL_CALL_START", {"tool": "time:get_current_time"}),
    entry(
        4, "TOOL_CALL_END", {"tool": "time:get_current_time", "success": True, "duration_ms": 12.5}
    ),
    entry(5, "EXECUTOR_RESPONSE", {"status": "success", "duration_ms": 40.0}),
]


@dataclass
class Cli:
    url: str

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, ["audit", *args], env={"PML_DATABASE_URL": self.url})

    def record(self, *args: str) -> dict[str, Any]:
        result = self.run("show", "--json", *args)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        lines = result.stdout.splitlines()
        assert len(lines) == 1  # one JSON object
        return json.loads(lines[0])

    def insert(self, *entries: AuditEntry) -> None:
        async def body() -> None:
            db = await Database.open(self.url)
            try:
                await AuditRepository(db).insert_many(list(entries))
            finally:
                await db.close()

        asyncio.run(body())

    def count(self) -> int:
        async def body() -> int:
            db = await Database.open(self.url)
            try:
                async with db.read() as conn:
                    query = sa.select(sa.func.count()).select_from(audit_events)
                    return int((await conn.execute(query)).scalar_one())
            finally:
                await db.close()

        return asyncio.run(body())


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    isolate_cli(tmp_path, monkeypatch)
    monkeypatch.setenv("PML_CONFIG", "")
    return Cli(url=f"sqlite:///{tmp_path / 'pml.db'}")


def test_json_prints_the_record_of_the_request(cli: Cli) -> None:
    cli.insert(*RUN, entry(6, "TOOL_CALL_END", {"n": 1}, request_id="another"))
    record = cli.record("4f2a9c01d3e5b7a9")
    assert record["request_id"] == "4f2a9c01d3e5b7a9"
    assert (record["scope"], record["actor"], record["outcome"]) == (
        "local.default",
        "erwan",
        "answered",
    )
    assert record["router"]["intent"] == "lookup_search"
    assert record["policy"]["rule"] == "policy:lookup_search"
    assert record["tool_calls"] == [
        {
            "tool": "time:get_current_time",
            "outcome": "ok",
            "duration_ms": 12.5,
            "decided_by": "default:allow:time",
        }
    ]
    assert record["timing_ms"] == {
        "router": None,
        "executor": 40.0,
        "tools": 12.5,
        "posthooks": None,
        "total": 1250.0,
    }
    assert [e["event"] for e in record["events"]] == [e.event for e in RUN]  # not "another"


def test_text_shows_each_stage_then_the_events(cli: Cli) -> None:
    cli.insert(*RUN)
    result = cli.run("show", "4f2a9c01d3e5b7a9")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "request 4f2a9c01d3e5b7a9  local.default  erwan  2025-06-01 12:30:00.000 → 12:30:01.250"
    )
    text = result.stdout
    assert "outcome       answered" in text
    assert "intent lookup_search  confidence 0.9  decided_by heuristic:time" in text
    assert "rule policy:lookup_search  allowed time  forbidden file_write" in text
    assert "  time:get_current_time  ok  12.5 ms  default:allow:time" in lines
    assert "permissions   asked -  granted -  denied -" in lines
    assert "timing ms     router -  executor 40.0  tools 12.5  posthooks -  total 1250.0" in lines
    events = lines[lines.index("events") + 1 :]
    assert [line.split()[1] for line in events] == [e.event for e in RUN]
    assert events[0].startswith("  12:30:00.000  ROUTER_OUTPUT         heuristic:time  {")


def test_an_agent_turn_shows_its_record(cli: Cli) -> None:
    record = {
        "text": "remember that I prefer metric units",
        "tools_offered": ["pml:remember"],
        "round_trips": 2,
        "memory": {"proposed": 1, "applied": [{"target": "pml", "sensitivity": "low"}]},
        "permissions": {"asked": ["memory:create_entities"], "granted": [], "denied": []},
        "clarifications": [{"question": "Units for what?"}],
        "outcome": "answered",
    }
    cli.insert(*RUN[:2], entry(9, "PIPELINE_RECORD", record, decided_by="agent"))
    text = cli.run("show", "4f2a9c01d3e5b7a9").stdout
    assert "text          remember that I prefer metric units" in text
    assert "offered       pml:remember" in text
    assert "round trips   2" in text
    assert "memory        proposed 1  applied 1  refused 0  waiting 0" in text
    assert '  applied   {"target": "pml", "sensitivity": "low"}' in text
    assert "permissions   asked memory:create_entities  granted -  denied -" in text
    assert '  {"question": "Units for what?"}' in text


def test_an_unknown_request_is_not_found_and_exit_1(cli: Cli) -> None:
    cli.insert(*RUN)
    line = assert_one_line_error(cli.run("show", "nope"), "NOT_FOUND")
    assert "No audit events for request nope" in line
    result = cli.run("show", "--json", "nope")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "NOT_FOUND"


def test_the_request_is_looked_up_in_the_scope_or_the_given_org_and_project(cli: Cli) -> None:
    cli.insert(
        *(entry(i, e.event, e.details, org="acme", project="webapp") for i, e in enumerate(RUN))
    )
    assert_one_line_error(cli.run("show", "4f2a9c01d3e5b7a9"), "NOT_FOUND")
    assert_one_line_error(cli.run("show", "4f2a9c01d3e5b7a9", "--org", "acme"), "NOT_FOUND")
    record = cli.record("4f2a9c01d3e5b7a9", "--org", "acme", "--project", "webapp")
    assert record["scope"] == "acme.webapp"


@pytest.mark.parametrize(
    "request_id",
    [
        "",
        "x" * 10_000,
        "'; DROP TABLE audit_events; --",
        "日本語",
        "a\nb",
        "a\x1b[2Jb",
        "a\u202eb",
        "r/../../etc",
    ],
)
def test_a_hostile_request_id_is_invalid_input_and_changes_nothing(
    cli: Cli, request_id: str
) -> None:
    cli.insert(*RUN)
    line = assert_one_line_error(cli.run("show", request_id), "INVALID_INPUT")
    assert "Invalid request id" in line
    assert "\x1b" not in line
    assert "\u202e" not in line
    assert len(line) < 300
    assert cli.count() == len(RUN)


def test_stored_control_and_bidi_characters_are_shown_escaped(cli: Cli) -> None:
    evil = "x\x1b[2J\u202eevil\nnext\x07"
    cli.insert(
        entry(0, "ROUTER_OUTPUT", {"intent": evil, "confidence": 0.5}, decided_by=evil),
        entry(1, "TOOL_CALL_START", {"tool": evil}),
        entry(2, "TOOL_CALL_END", {"tool": evil, "success": False}, actor=evil),
        entry(3, "PIPELINE_RECORD", {"text": evil, "tools_offered": [evil], "outcome": evil}),
    )
    result = cli.run("show", "4f2a9c01d3e5b7a9")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for raw in ("\x1b", "\u202e", "\x07"):
        assert raw not in out
    assert "x\\x1b[2J\\u202eevil\\nnext\\x07" in out
    assert not any(line.startswith("next") for line in out.splitlines())
    assert "  x\\x1b[2J\\u202eevil\\nnext\\x07  error  -  -" in out.splitlines()
    # --json keeps the stored text as it is, inside one JSON string
    assert cli.record("4f2a9c01d3e5b7a9")["text"] == evil
