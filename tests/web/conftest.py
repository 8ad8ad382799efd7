"""The dashboard under test: a real gateway (policy pipeline, in-process upstream servers
named like the reference ones, the real sandbox, an SDK client for the agent) and its HTTP
app driven in-process by httpx, signed in as a person with an admin key.

    async def test_something(web: WebHarness) -> None:
        page = await web.get("/ui/capabilities")          # signed in as ana (admin)
        done = await web.post("/ui/capabilities/rename", {"fqdn": ..., "name": ...})
        failed, data = await web.pg.execute(code=..., intent=...)   # the agent's side
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.web.dashboard.sessions import SESSION_COOKIE, csrf_token
from policy.conftest import (  # noqa: F401 - fixtures re-used here
    SCOPE,
    OpenPolicyGateway,
    PolicyGateway,
    open_policy_gateway,
    pg,
)
from web.browser import chromium_path, open_browser

BASE = "http://testserver"
LOGIN_CSRF = re.compile(r'name="login_csrf" value="([^"]+)"')


@pytest.fixture(autouse=True)
def _browser_is_there(request: pytest.FixtureRequest) -> None:
    """A test module that drives the browser skips (fails under CI) here, before any async
    fixture: raised inside an async test, pytest's skip or failure would end the worker's
    anyio runner and error every async test after it."""
    if getattr(request.module, "open_browser", None) is open_browser:
        chromium_path()


@dataclass
class WebHarness:
    """A signed-in person's browser, minus the browser (cookies kept by httpx)."""

    pg: PolicyGateway
    http: httpx.AsyncClient
    admin_key: str
    agent_key: str

    @property
    def csrf(self) -> str:
        token = self.http.cookies.get(SESSION_COOKIE)
        assert token is not None, "not signed in"
        return csrf_token(token)

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.http.get(path, params=params or None)

    async def post(
        self, path: str, data: dict[str, str], *, csrf: bool = True, origin: str | None = BASE
    ) -> httpx.Response:
        """A form post as the page makes it (same origin, with the CSRF token)."""
        fields = {"csrf": self.csrf, **data} if csrf else dict(data)
        headers = {"Origin": origin} if origin is not None else {}
        return await self.http.post(path, data=fields, headers=headers)


async def sign_in(http: httpx.AsyncClient, key: str, next_path: str = "/") -> httpx.Response:
    """The login form, filled in with ``key`` and sent as a browser would."""
    form = await http.get("/ui/login")
    match = LOGIN_CSRF.search(form.text)
    assert match is not None, form.text
    return await http.post(
        "/ui/login",
        data={"key": key, "login_csrf": match.group(1), "next": next_path},
        headers={"Origin": BASE},
    )


@pytest.fixture
async def web(pg: PolicyGateway) -> AsyncGenerator[WebHarness]:  # noqa: F811
    """The gateway's HTTP app, signed in with an admin key of the gateway's org/project."""
    keys = ApiKeys(pg.gateway.db)
    admin_key, _ = await keys.create(SCOPE.org, SCOPE.project, "ana", role="admin")
    agent_key, _ = await keys.create(SCOPE.org, SCOPE.project, SCOPE.user)
    app = create_app(pg.gateway)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        signed = await sign_in(http, admin_key)
        assert signed.status_code == 303, signed.text
        yield WebHarness(pg, http, admin_key, agent_key)
