"""``pml approvals list|show|approve|deny``: a person decides what runs wait for.

On one SQLite file (the typer app, and the real ``pml`` on a pseudo-terminal for the
question only a person answers), and against a real gateway over HTTP with admin and agent
keys. Approvals are paused for real: stored as ``ApprovalFlow.pause`` stores them, or by a
run that reaches an ``ask``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from mcp import Client
from typer.testing import CliRunner, Result

from clisupport import assert_one_line_error, isolate_cli, on_terminal, sub_app
from pml.cli import approvals_cmd
from pml.config import ScopeSettings, Settings
from pml.execution.values import args_digest
from pml.gateway.http import running_http
from pml.gateway.keys import ApiKeys
from pml.gateway.server import open_gateway
from pml.policy.approval_view import argument_view
from pml.policy.grants import GrantService
from pml.policy.permissions import Grant
from pml.policy.version import policy_version
from pml.registry.scope import Scope
from pml.storage.database import Database
from pml.storage.tables import audit_events
from pml.storage.workflow_repo import StoredWorkflow, WorkflowStateStore
from pml.upstream.pool import ClientPool
from policy.conftest import policy_upstreams

app = sub_app(approvals_cmd.register)
PML = str(Path(sys.executable).parent / "pml")
SCOPE = Scope("acme", "webapp", "erwan")
CONTENT = "x" * 10240
WAIT_S = 60.0


class NoAudit:
    def emit(self, event: str, **_: Any) -> None:
        pass


def paused_state(tool: str, capability: str, arguments: dict[str, Any], **extra: Any) -> Any:
    """A workflow state shaped like the one ``ApprovalFlow.pause`` stores."""
    call = {
        "tool": tool,
        "server": tool.split(":", 1)[0],
        "capability": capability,
        "args_summary": ", ".join(arguments),
        "reason": f"ask:{capability}",
        "arguments": argument_view(arguments),
        "args_digest": args_digest(arguments),
    }
    state: dict[str, Any] = {
        "resume": {"mode": "execute", "intent": "save the file", "params": {}},
        "journal": [],
        "approvals": [call],
        "request_id": "req_1",
        "intent": "file",
        "statedIntent": "save the file",
        "capabilityName": None,
        "key": None,
    }
    return state | extra


@dataclass
class Local:
    """The CLI on one SQLite file, and what that file holds."""

    url: str
    env: dict[str, str]
    workdir: Path

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(app, ["approvals", *args], env=self.env)

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def _db(self, body: Any) -> Any:
        async def run() -> Any:
            db = await Database.open(self.url)
            try:
                return await body(db)
            finally:
                await db.close()

        return asyncio.run(run())

    def pause(self, workflow_id: str, state: dict[str, Any], scope: Scope = SCOPE) -> None:
        async def put(db: Database) -> None:
            store = WorkflowStateStore(db)
            await store.put(workflow_id, kind="approval", scope=scope, state=state, ttl_s=900)

        self._db(put)

    def stored(self, workflow_id: str) -> StoredWorkflow | None:
        async def find(db: Database) -> StoredWorkflow | None:
            return await WorkflowStateStore(db).find(
                workflow_id, kind="approval", org=SCOPE.org, project=SCOPE.project
            )

        return self._db(find)

    def grants(self) -> list[Grant]:
        async def listed(db: Database) -> list[Grant]:
            service = GrantService(db, NoAudit(), policy_version=policy_version(Settings()))
            return await service.list(SCOPE, include_inactive=True)

        return self._db(listed)

    def audited(self, event: str) -> list[dict[str, Any]]:
        async def rows(db: Database) -> list[dict[str, Any]]:
            query = sa.select(audit_events).where(audit_events.c.event == event)
            async with db.read() as conn:
                return [dict(row._mapping) for row in (await conn.execute(query)).all()]  # pyright: ignore[reportPrivateUsage]

        return self._db(rows)

    def on_terminal(self, *args: str, answer: str) -> tuple[int, str]:
        return on_terminal(["approvals", *args], self.env, self.workdir, answer)


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Local:
    workdir = isolate_cli(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'pml.db'}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "COLUMNS": "200",
        "TERM": "dumb",
        "PML_CONFIG": "",
        "PML_DATABASE_URL": url,
        "PML_SCOPE__ORG": SCOPE.org,
        "PML_SCOPE__PROJECT": SCOPE.project,
        "PML_SCOPE__USER": SCOPE.user,
        # The person at the keyboard: not the [scope] user whose runs wait.
        "LOGNAME": "ana",
        "USER": "ana",
    }
    return Local(url, env, workdir)


def _write(local: Local, workflow_id: str = "wf_write1") -> str:
    arguments = {"content": CONTENT, "path": "/srv/app/main.py"}
    local.pause(workflow_id, paused_state("filesystem:write_file", "file_write", arguments))
    return workflow_id


def test_list_shows_each_waiting_approval_with_its_target_and_json_gives_the_views(
    local: Local,
) -> None:
    _write(local)
    local.pause("wf_run2", paused_state("shell:run", "system_execute", {"command": "make deploy"}))
    table = local.run("list")
    listed = local.json("list")
    assert table.exit_code == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if "wf_" in line]
    assert len(rows) == 2
    assert all(word in rows[0] for word in ("wf_write1", "filesystem:write_file", "file_write"))
    assert "path=/srv/app/main.py" in rows[0]
    assert "command=make deploy" in rows[1]
    assert "erwan" in rows[1]
    assert [item["workflowId"] for item in listed["items"]] == ["wf_write1", "wf_run2"]
    first = listed["items"][0]
    assert {"workflowId", "tool", "capability", "intent", "arguments", "user", "expiresAt"} <= set(
        first
    )
    assert first["status"] == "pending"
    assert first["user"] == "erwan"
    assert [arg["name"] for arg in first["arguments"]] == ["path", "content"]
    assert first["arguments"][1]["bytes"] == 10240


def test_list_says_so_in_one_line_when_nothing_waits(local: Local) -> None:
    result = local.run("list")
    assert result.exit_code == 0
    assert result.stdout.strip() == "no approvals waiting"
    assert local.json("list") == {"items": []}


def test_show_puts_the_path_of_a_10_kb_write_before_its_content_with_the_byte_count(
    local: Local,
) -> None:
    _write(local)
    result = local.run("show", "wf_write1")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    order = [
        "tool:        filesystem:write_file (server filesystem)",
        "permission:  file_write",
        "intent:      file (stated: save the file)",
        "rule ask:file_write",
        "requested by erwan",
        "▶ path: /srv/app/main.py",
        "content: xxx",
        "once: only this call",
        "session: every call of filesystem:write_file by erwan",
        "always: every call",
        "Expires at ",
    ]
    positions = [next(i for i, line in enumerate(lines) if part in line) for part in order]
    assert positions == sorted(positions)
    content = next(line for line in lines if "content:" in line)
    assert "[10240 bytes]" in content
    assert len(result.stdout) < 3000  # head and tail of the content, not all of it
    assert local.json("show", "wf_write1")["arguments"][0]["value"] == "/srv/app/main.py"


def test_show_escapes_control_and_bidi_characters_that_come_from_the_approval(
    local: Local,
) -> None:
    state = paused_state(
        "filesystem:write_file",
        "file_write",
        {"path": "/srv/\u202etxt.exe", "content": "hi\x1b[2J"},
        statedIntent="tidy\x1b]0;owned\x07 up\u2066",
        capabilityName="cap\u200bname",
    )
    local.pause("wf_evil", state, Scope("acme", "webapp", "eve\u202e\x1b[31m"))
    shown = local.run("show", "wf_evil")
    table = local.run("list")
    for output in (shown.stdout, table.stdout):
        assert not any(char in output for char in "\x1b\x07\u202e\u2066\u200b")
    assert "/srv/\\u202etxt.exe" in shown.stdout
    assert "capability:  cap\\u200bname" in shown.stdout
    assert "requested by eve\\u202e\\x1b[31m" in shown.stdout


def test_approve_without_a_terminal_is_refused_and_decides_nothing(local: Local) -> None:
    _write(local)
    result = local.run("approve", "wf_write1", "--grant", "always")
    line = assert_one_line_error(result, "FORBIDDEN")
    assert "person" in line
    assert "own shell" in line
    assert "--server URL --api-key" in line
    stored = local.stored("wf_write1")
    assert stored is not None
    assert stored.decision is None
    assert local.grants() == []
    assert local.json("show", "wf_write1")["status"] == "pending"


def test_a_person_approves_on_a_terminal_with_y_and_the_grant_is_theirs_to_give(
    local: Local,
) -> None:
    _write(local)
    code, output = local.on_terminal("approve", "wf_write1", "--grant", "session", answer="y")
    assert code == 0, output
    question = "Approve filesystem:write_file for erwan, grant session? [y/N]"
    assert question in output
    assert output.index("▶ path: /srv/app/main.py") < output.index("content: xxx")
    assert output.index("content: xxx") < output.index(question)
    assert "approved wf_write1: filesystem:write_file for erwan, grant session (by user:ana)" in (
        output
    )
    stored = local.stored("wf_write1")
    assert stored is not None
    assert stored.decision == "approved"
    assert stored.state["decision"]["decidedBy"] == "user:ana"
    assert stored.state["decision"]["grant"] == "session"
    [grant] = local.grants()
    assert grant.principal == "erwan"  # the user whose run waits
    assert grant.capability == "file_write"
    assert grant.max_uses is None
    assert grant.expires_at is not None
    [audited] = local.audited("APPROVAL_DECIDED")
    assert audited["decided_by"] == "user:ana"
    # A decision is taken once: neither a second approval nor a denial changes it.
    again_code, again = local.on_terminal("approve", "wf_write1", answer="y")
    denied = local.run("deny", "wf_write1")
    assert again_code == 1
    assert "error: ALREADY_DECIDED: Approval wf_write1 was already approved by user:ana" in again
    assert "[y/N]" not in again
    assert_one_line_error(denied, "ALREADY_DECIDED")
    assert len(local.grants()) == 1


@pytest.mark.parametrize("answer", ["n", "", "yess", "no", "Y es"])
def test_any_answer_but_y_or_yes_decides_nothing(local: Local, answer: str) -> None:
    _write(local)
    code, output = local.on_terminal("approve", "wf_write1", answer=answer)
    assert code == 1
    assert "not approved: nothing decided" in output
    stored = local.stored("wf_write1")
    assert stored is not None
    assert stored.decision is None
    assert local.grants() == []


def test_a_once_approval_with_yes_issues_a_single_use_grant_for_these_arguments(
    local: Local,
) -> None:
    _write(local)
    code, output = local.on_terminal("approve", "wf_write1", answer="YES")
    assert code == 0, output
    [grant] = local.grants()
    assert grant.max_uses == 1
    assert grant.args_digest == args_digest({"content": CONTENT, "path": "/srv/app/main.py"})


def test_deny_needs_no_terminal_and_issues_no_grant(local: Local) -> None:
    _write(local)
    result = local.run("deny", "wf_write1")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("denied wf_write1: filesystem:write_file for erwan")
    assert "(by user:ana)" in result.stdout
    stored = local.stored("wf_write1")
    assert stored is not None
    assert stored.decision == "denied"
    assert local.grants() == []
    again = local.run("deny", "wf_write1", "--json")
    assert again.exit_code == 1
    assert json.loads(again.stdout)["error"]["code"] == "ALREADY_DECIDED"


def test_an_unknown_id_is_not_found_in_one_line(local: Local) -> None:
    _write(local)
    for verb in ("show", "deny"):
        line = assert_one_line_error(local.run(verb, "wf_0123456789abcdef"), "NOT_FOUND")
        assert "wf_0123456789abcdef" in line
    assert local.run("show", "wf_nope", "--json").exit_code == 1


def test_another_projects_approval_is_not_found_here(local: Local) -> None:
    local.pause(
        "wf_other",
        paused_state("shell:run", "system_execute", {"command": "ls"}),
        Scope("acme", "other", "erwan"),
    )
    assert_one_line_error(local.run("deny", "wf_other"), "NOT_FOUND")
    assert local.json("list") == {"items": []}


HOSTILE_IDS = [
    "",
    "x" * 10_000,
    "wf_1'; DROP TABLE workflow_state;--",
    "wf_1\u202e",
    "wf_\x1b[2J",
    "../../api/keys",
    "wf_1 OR 1=1",
    "wf_1\nwf_2",
    "wf_😀",
    "%2e%2e",
]


@pytest.mark.parametrize("workflow_id", HOSTILE_IDS)
def test_a_malformed_id_is_one_clear_line_and_changes_nothing(
    local: Local, workflow_id: str
) -> None:
    _write(local)
    # With --server too: refused before any request (port 9 would be UPSTREAM_UNAVAILABLE).
    remote = ["--server", "http://127.0.0.1:9", "--api-key", "k"]
    for verb, where in itertools.product(("show", "deny", "approve"), ([], remote)):
        line = assert_one_line_error(local.run(verb, workflow_id, *where), "INVALID_INPUT")
        assert "Not an approval id" in line
        assert len(line) < 200
        assert line.isprintable()
    stored = local.stored("wf_write1")
    assert stored is not None
    assert stored.decision is None
    assert local.json("list")["items"][0]["workflowId"] == "wf_write1"


@pytest.mark.parametrize("grant", ["forever", "", "ONCE", "once;rm -rf /", "session\u202e", "deny"])
def test_a_grant_other_than_once_session_or_always_is_refused(local: Local, grant: str) -> None:
    _write(local)
    line = assert_one_line_error(
        local.run("approve", "wf_write1", "--grant", grant), "INVALID_INPUT"
    )
    assert "--grant must be one of: once, session, always" in line
    assert line.isprintable()
    assert local.grants() == []


@pytest.mark.parametrize(
    "server", ["not a url", "ftp://pml.example.com", "http://", "http://h:port", "http://h/?q=1"]
)
def test_a_server_that_is_not_an_http_url_is_refused_before_any_request(
    local: Local, server: str
) -> None:
    line = assert_one_line_error(
        local.run("list", "--server", server, "--api-key", "k"), "INVALID_INPUT"
    )
    assert "--server" in line


def test_server_and_api_key_go_together(local: Local) -> None:
    no_key = local.run("list", "--server", "http://127.0.0.1:9")
    no_server = local.run("list", "--api-key", "pml_k")
    assert "--api-key" in assert_one_line_error(no_key, "INVALID_INPUT")
    assert "--server" in assert_one_line_error(no_server, "INVALID_INPUT")
    # $PML_API_KEY is set for `pml connect` too: without --server it is not a mistake.
    from_env = CliRunner().invoke(app, ["approvals", "list"], env=local.env | {"PML_API_KEY": "k"})
    assert from_env.exit_code == 0, from_env.stderr


def test_a_refused_connection_names_the_url(local: Local) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    line = assert_one_line_error(
        local.run("deny", "wf_1", "--server", url, "--api-key", "k"), "UPSTREAM_UNAVAILABLE"
    )
    assert url in line


@contextmanager
def answering(status: int, body: bytes) -> Iterator[str]:
    """An HTTP server that is not a PML: every request gets ``status`` and ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=WAIT_S)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"<html>hello</html>"),
        (500, b"Internal Server Error"),
        (200, b'{"items": "nope"}'),
        (200, b"[" * 5000),
        (404, b'{"detail": "Not Found"}'),
    ],
)
def test_a_server_that_does_not_answer_like_pml_is_one_clear_line(
    local: Local, status: int, body: bytes
) -> None:
    with answering(status, body) as url:
        result = local.run("list", "--server", url, "--api-key", "k")
    line = assert_one_line_error(result, "UPSTREAM_UNAVAILABLE")
    assert url in line
    assert "check --server" in line


# --- against a shared PML over HTTP ---------------------------------------------------

SAVE = """
await mcp.filesystem.read_text_file(path="/w/note.txt")
await mcp.filesystem.write_file(path="/w/copy.txt", content="x" * 10240)
return "saved"
"""


@dataclass
class Shared:
    """A gateway serving HTTP, an admin and an agent key of its org/project."""

    url: str
    admin: str
    agent: str
    client: Client
    gateway: Any
    env: dict[str, str]

    async def cli(self, *args: str, key: str | None = None) -> tuple[int, str, str]:
        """The real ``pml approvals ...`` (stdin not a terminal) against this PML."""
        command = [PML, "approvals", *args, "--server", self.url]
        if key is not None:
            command += ["--api-key", key]
        with anyio.fail_after(WAIT_S):
            done = await anyio.run_process(
                command, check=False, env=self.env, stdin=subprocess.DEVNULL
            )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    async def pause(self) -> str:
        result = await self.client.call_tool(
            "pml_execute", {"intent": "copy the note to a new file", "code": SAVE}
        )
        data = result.structured_content or {}
        assert data.get("status") == "approval_required", data
        return str(data["workflowId"])

    async def resume(self, workflow_id: str) -> dict[str, Any]:
        result = await self.client.call_tool(
            "pml_execute",
            {
                "intent": "resume",
                "continue_workflow": {"workflow_id": workflow_id, "approved": True},
            },
        )
        return result.structured_content or {}


@asynccontextmanager
async def shared_pml(tmp_path: Path) -> AsyncIterator[Shared]:
    upstreams = policy_upstreams()
    pool = ClientPool({name: up.server for name, up in upstreams.items()})
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite:///{tmp_path / 'shared.db'}",
            "expose_upstream": True,
            "scope": ScopeSettings(org="acme", project="webapp", user="erwan"),
            "audit": {"file": str(tmp_path / "audit.jsonl")},
            "discovery": {"embedder": "hashing"},
        }
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "COLUMNS": "200",
        "PML_CONFIG": "",
        "PML_DATABASE_URL": f"sqlite:///{tmp_path / 'not-this-one.db'}",
    }
    async with open_gateway(settings, pool=pool) as gateway, Client(gateway.server) as client:
        keys = ApiKeys(gateway.db)
        admin = (await keys.create("acme", "webapp", user="ana", role="admin"))[0]
        agent = (await keys.create("acme", "webapp", user="erwan"))[0]
        async with running_http(gateway) as url:
            yield Shared(url, admin, agent, client, gateway, env)


@pytest.mark.anyio
async def test_an_admin_key_lists_shows_and_approves_over_http_and_the_run_resumes(
    tmp_path: Path,
) -> None:
    async with shared_pml(tmp_path) as pml:
        workflow = await pml.pause()
        listed = await pml.cli("list", "--json", key=pml.admin)
        shown = await pml.cli("show", workflow, key=pml.admin)
        pml.env["PML_API_KEY"] = pml.admin  # the key may come from the environment
        approved = await pml.cli("approve", workflow, "--grant", "session", "--json")
        resumed = await pml.resume(workflow)
        grants = await pml.gateway.policy.grants.list(SCOPE)
    assert listed[0] == 0, listed[2]
    [item] = json.loads(listed[1])["items"]
    assert item["workflowId"] == workflow
    assert item["tool"] == "filesystem:write_file"
    assert item["user"] == "erwan"
    assert shown[0] == 0, shown[2]
    assert shown[1].index("▶ path: /w/copy.txt") < shown[1].index("content: ")
    assert "bytes]" in shown[1]
    assert approved[0] == 0, approved[2]
    decided = json.loads(approved[1])
    assert decided["status"] == "approved"
    assert decided["grant"] == "session"
    assert decided["decidedBy"] == "user:ana"
    assert resumed.get("status") == "success", resumed
    [grant] = grants
    assert grant.principal == "erwan"
    assert grant.max_uses is None


@pytest.mark.anyio
async def test_an_agent_key_gets_the_admin_key_message_and_decides_nothing(
    tmp_path: Path,
) -> None:
    async with shared_pml(tmp_path) as pml:
        workflow = await pml.pause()
        refused = [
            await pml.cli(*args, key=pml.agent)
            for args in (("list",), ("show", workflow), ("approve", workflow), ("deny", workflow))
        ]
        still = await pml.cli("show", workflow, "--json", key=pml.admin)
        grants = await pml.gateway.policy.grants.list(SCOPE)
    for code, stdout, stderr in refused:
        assert code == 1
        assert stdout == ""
        [line] = stderr.splitlines()
        assert line.startswith("error: FORBIDDEN: ")
        assert "admin API key" in line
    assert json.loads(still[1])["status"] == "pending"
    assert grants == []


@pytest.mark.anyio
async def test_denying_over_http_ends_the_run_and_a_decision_is_taken_once(
    tmp_path: Path,
) -> None:
    async with shared_pml(tmp_path) as pml:
        workflow = await pml.pause()
        denied = await pml.cli("deny", workflow, key=pml.admin)
        twice = await pml.cli("approve", workflow, "--grant", "always", key=pml.admin)
        unknown = await pml.cli("deny", "wf_0123456789abcdef01234567", key=pml.admin)
        bad_key = await pml.cli("list", key="pml_not_a_real_key")
        resumed = await pml.resume(workflow)
        grants = await pml.gateway.policy.grants.list(SCOPE)
    assert denied[0] == 0, denied[2]
    assert denied[1].startswith(f"denied {workflow}: filesystem:write_file for erwan")
    assert twice[0] == 1
    assert twice[2].startswith("error: ALREADY_DECIDED: ")
    assert unknown[0] == 1
    assert unknown[2].startswith("error: NOT_FOUND: ")
    assert bad_key[0] == 1
    assert bad_key[2].startswith("error: UNAUTHORIZED: ")
    assert resumed.get("error", {}).get("code") == "PERMISSION_DENIED", resumed
    assert grants == []


@pytest.mark.anyio
async def test_against_a_server_a_terminal_gets_the_same_question_and_n_decides_nothing(
    tmp_path: Path,
) -> None:
    async with shared_pml(tmp_path) as pml:
        workflow = await pml.pause()
        args = ["approvals", "approve", workflow, "--server", pml.url, "--api-key", pml.admin]
        code, output = await anyio.to_thread.run_sync(on_terminal, args, pml.env, tmp_path, "n")
        still = await pml.cli("show", workflow, "--json", key=pml.admin)
    assert code == 1
    assert output.index("▶ path: /w/copy.txt") < output.index(
        "Approve filesystem:write_file for erwan, grant once? [y/N]"
    )
    assert "not approved: nothing decided" in output
    assert json.loads(still[1])["status"] == "pending"
