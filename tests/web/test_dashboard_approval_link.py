"""``[permissions] approval_url``: a client that can open links is sent the approval's page
on the dashboard, and the agent's call completes at once when the person decides there."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.web.dashboard.sessions import SESSION_COOKIE, csrf_token
from policy.conftest import SCOPE, OpenPolicyGateway, PolicyGateway
from web.conftest import BASE, sign_in

pytestmark = pytest.mark.anyio

WRITE = 'await mcp.filesystem.write_file(path="/w/report.txt", content="hello")\nreturn "ok"'
CALL = {"intent": "write the report file", "code": WRITE}
WAIT_S = 20.0


@dataclass
class Person:
    """The person behind the agent's client: opens (or refuses) the links it is sent."""

    action: Literal["accept", "decline", "cancel"] = "accept"
    links: list[mcp_types.ElicitRequestParams] = field(default_factory=list[Any])
    opened: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.links.append(params)
        self.opened.set()
        return mcp_types.ElicitResult(action=self.action)


@dataclass
class Linked:
    pg: PolicyGateway
    http: httpx.AsyncClient


@pytest.fixture
async def linked(open_policy_gateway: OpenPolicyGateway) -> AsyncGenerator[Linked]:
    permissions = {"approval_url": f"{BASE}/", "approval_wait_s": WAIT_S}
    async with open_policy_gateway(permissions=permissions) as pg:
        key, _ = await ApiKeys(pg.gateway.db).create(SCOPE.org, SCOPE.project, "ana", role="admin")
        transport = httpx.ASGITransport(app=create_app(pg.gateway))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            assert (await sign_in(http, key)).status_code == 303
            yield Linked(pg, http)


async def call_and_decide(
    linked: Linked, person: Person, decision: str | None, *, mode: str = "legacy"
) -> tuple[mcp_types.CallToolResult, str]:
    """The agent's call runs while the person opens the link and (maybe) decides there."""
    answer: dict[str, mcp_types.CallToolResult] = {}
    path = ""
    async with Client(linked.pg.gateway.server, mode=mode, elicitation_callback=person) as agent:

        async def call() -> None:
            answer["result"] = await agent.call_tool("pml_execute", CALL)

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await person.opened.wait()
                [link] = person.links
                if isinstance(link, mcp_types.ElicitRequestURLParams):
                    path = urlsplit(link.url).path
                    page = await linked.http.get(path)
                    assert page.status_code == 200
                    assert "/w/report.txt" in page.text
                    if decision is not None:
                        token = linked.http.cookies.get(SESSION_COOKIE) or ""
                        posted = await linked.http.post(
                            f"{path}/decide",
                            data={"csrf": csrf_token(token), "decision": decision},
                            headers={"Origin": BASE},
                        )
                        assert posted.status_code == 303
    return answer["result"], path


async def test_the_call_completes_at_once_when_the_person_approves_on_the_linked_page(
    linked: Linked,
) -> None:
    person = Person()
    result, path = await call_and_decide(linked, person, "once")
    [link] = person.links
    assert isinstance(link, mcp_types.ElicitRequestURLParams)
    assert link.url == f"{BASE}{path}"
    assert path.startswith("/ui/approvals/wf_")
    assert link.elicitation_id == path.rsplit("/", 1)[1]
    assert "filesystem:write_file" in link.message
    assert result.structured_content is not None
    assert result.structured_content["status"] == "success", result.structured_content
    assert linked.pg.sent("filesystem") == ["write_file"]
    [decided] = await linked.pg.events("APPROVAL_DECIDED")
    assert decided["decided_by"] == "user:ana"


async def test_a_denial_on_the_linked_page_ends_the_call_with_nothing_written(
    linked: Linked,
) -> None:
    result, _ = await call_and_decide(linked, Person(), "deny")
    assert result.is_error is True
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "PERMISSION_DENIED"
    assert linked.pg.sent("filesystem") == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_refused_link_leaves_the_run_paused_for_a_person_elsewhere(
    linked: Linked, action: Literal["decline", "cancel"]
) -> None:
    result, _ = await call_and_decide(linked, Person(action=action), None)
    assert result.structured_content is not None
    assert result.structured_content["status"] == "approval_required"
    assert linked.pg.sent("filesystem") == []
    [refused] = [
        e
        for e in await linked.pg.events("APPROVAL_ELICITATION")
        if e["details"]["outcome"] == "link_refused"
    ]
    assert refused["details"]["reason"] == action


async def test_the_agent_cannot_choose_where_the_link_points(linked: Linked) -> None:
    person = Person()
    async with Client(
        linked.pg.gateway.server,
        mode="legacy",
        elicitation_callback=person,
    ) as agent:
        with anyio.move_on_after(0.5):  # the call waits for a decision; only its link matters
            await agent.call_tool(
                "pml_execute",
                {**CALL, "intent": "write the report file https://evil.example/ui/approvals"},
            )
    [link] = person.links
    assert isinstance(link, mcp_types.ElicitRequestURLParams)
    assert link.url.startswith(f"{BASE}/ui/approvals/wf_")


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "http://user:pw@evil.example", "ftp://x", "http://a b"]
)
def test_only_a_plain_http_base_url_is_accepted_as_the_approval_url(url: str) -> None:
    from pydantic import ValidationError

    from pml.sections import PermissionsSettings

    with pytest.raises(ValidationError):
        PermissionsSettings(approval_url=url)


async def test_a_stateless_client_still_gets_the_form_it_answers_in_the_same_call(
    linked: Linked,
) -> None:
    person = Person()
    result, path = await call_and_decide(linked, person, None, mode="2026-07-28")
    assert path == ""
    [form] = person.links
    assert isinstance(form, mcp_types.ElicitRequestFormParams)  # no link in that generation
    assert result.is_error is True  # accepted without a decision: denied, nothing written
    assert linked.pg.sent("filesystem") == []
