"""Signing in to the dashboard: admin keys only, cookies that scripts cannot read, forms
that other sites cannot post, and sessions that end with their key."""

from __future__ import annotations

import httpx
import pytest

from pml.gateway.http import create_app
from pml.gateway.keys import ApiKeys
from pml.web.dashboard.sessions import SESSION_COOKIE
from pml.web.dashboard.signin import safe_next
from policy.conftest import PolicyGateway
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio


async def test_an_admin_key_signs_in_with_an_httponly_strict_cookie(pg: PolicyGateway) -> None:
    key, _ = await ApiKeys(pg.gateway.db).create("acme", "webapp", "ana", role="admin")
    transport = httpx.ASGITransport(app=create_app(pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        answer = await sign_in(http, key, "/ui/servers")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/servers"
        cookie = next(
            value
            for name, value in answer.headers.multi_items()
            if name == "set-cookie" and value.startswith(SESSION_COOKIE)
        )
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        page = await http.get("/ui/servers")
        assert page.status_code == 200
        assert "ana" in page.text


async def test_an_agent_key_or_a_wrong_key_cannot_sign_in(pg: PolicyGateway) -> None:
    agent, _ = await ApiKeys(pg.gateway.db).create("acme", "webapp", "erwan")
    transport = httpx.ASGITransport(app=create_app(pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        refused = await sign_in(http, agent)
        assert refused.status_code == 403
        assert "agent key" in refused.text
        wrong = await sign_in(http, "pml_" + "x" * 43)
        assert wrong.status_code == 401
        hostile = await sign_in(http, "<script>alert(1)</script>\u202e\x00" * 50)
        assert hostile.status_code == 401
        assert "<script>alert" not in hostile.text
        assert SESSION_COOKIE not in http.cookies
        page = await http.get("/ui/approvals")
        assert page.status_code == 303
        assert page.headers["location"].startswith("/ui/login")


async def test_a_login_post_from_another_site_or_without_its_token_is_refused(
    pg: PolicyGateway,
) -> None:
    key, _ = await ApiKeys(pg.gateway.db).create("acme", "webapp", "ana", role="admin")
    transport = httpx.ASGITransport(app=create_app(pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        cross = await http.post(
            "/ui/login", data={"key": key}, headers={"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403
        tokenless = await http.post("/ui/login", data={"key": key}, headers={"Origin": BASE})
        assert tokenless.status_code == 403
        assert SESSION_COOKIE not in http.cookies


async def test_posts_without_csrf_or_from_another_origin_change_nothing(web: WebHarness) -> None:
    no_token = await web.post("/ui/logout", {}, csrf=False)
    assert no_token.status_code == 403
    cross = await web.post("/ui/logout", {}, origin="http://127.0.0.1:9")
    assert cross.status_code == 403
    still = await web.get("/ui/capabilities")
    assert still.status_code == 200


async def test_revoking_the_key_ends_its_dashboard_sessions(web: WebHarness) -> None:
    assert (await web.get("/ui/capabilities")).status_code == 200
    keys = ApiKeys(web.pg.gateway.db)
    await keys.revoke(web.admin_key[:12])
    after = await web.get("/ui/capabilities")
    assert after.status_code == 303


async def test_signing_out_ends_the_session_for_good(web: WebHarness) -> None:
    token = web.http.cookies.get(SESSION_COOKIE)
    out = await web.post("/ui/logout", {})
    assert out.status_code == 303
    web.http.cookies.set(SESSION_COOKIE, token or "")
    assert (await web.get("/ui/capabilities")).status_code == 303


async def test_the_dashboard_never_takes_a_bearer_key_and_the_api_never_a_cookie(
    web: WebHarness,
) -> None:
    api = await web.http.get("/api/approvals")  # the session cookie is sent, no bearer key
    assert api.status_code == 401
    async with httpx.AsyncClient(
        transport=web.http._transport,  # pyright: ignore[reportPrivateUsage]
        base_url=BASE,
        headers={"Authorization": f"Bearer {web.admin_key}"},
    ) as bearer:
        page = await bearer.get("/ui/capabilities")
        assert page.status_code == 303


def test_only_same_site_paths_are_followed_after_sign_in() -> None:
    assert safe_next("/ui/audit?event=X") == "/ui/audit?event=X"
    for hostile in (
        "//evil.example/x",
        "https://evil.example",
        "/\\evil",
        "javascript:x",
        "",
        None,
    ):
        assert safe_next(hostile) == "/"
    assert safe_next("/ui/x\r\nSet-Cookie: a=b") == "/"


async def test_an_opaque_origin_counts_only_with_same_origin_fetch_metadata(
    web: WebHarness,
) -> None:
    fields = {"csrf": web.csrf}
    blind = await web.http.post("/ui/logout", data=fields, headers={"Origin": "null"})
    assert blind.status_code == 403
    cross = await web.http.post(
        "/ui/logout", data=fields, headers={"Origin": "null", "Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    assert (await web.get("/ui/capabilities")).status_code == 200
    same = await web.http.post(
        "/ui/logout", data=fields, headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"}
    )
    assert same.status_code == 303
    assert (await web.get("/ui/capabilities")).status_code == 303


async def test_every_page_shows_invisible_and_bidi_characters_as_escapes(
    web: WebHarness,
) -> None:
    web.pg.gateway.policy.audit.emit(
        "TOOL_CALL_END",
        scope=web.pg.gateway.default_scope,
        details={"tool": "fs:read", "note": "safe\u202e.txt\u200bexe"},
    )
    await web.pg.gateway.policy.audit.flush()
    page = await web.get("/ui/audit")
    assert page.status_code == 200
    assert "\u202e" not in page.text
    assert "\u200b" not in page.text
    assert "safe\\u202e.txt\\u200bexe" in page.text
