"""The capabilities pages: the same list as the API, search ranked as pml_discover, a
capability's code, schema, intents, aliases, versions and usage, and the changes a person
makes there (rename, visibility, description) — with the MCP tool's rules and errors."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.subscriptions import ToolsListChanged
from starlette.applications import Starlette

from pml.gateway.http import as_key_check, create_app, web_services_of
from pml.gateway.keys import ApiKeys
from pml.registry.models import RenameChanges
from pml.registry.scope import Scope
from pml.registry.tools import CapTools
from pml.storage.usage_repo import CAPABILITY_SERVER_ID, SqlToolUsageRepository
from pml.web.dashboard import dashboard_routes
from pml.web.dashboard.code_view import highlight_stylesheet
from policy.conftest import SCOPE
from web.conftest import BASE, WebHarness, sign_in

pytestmark = pytest.mark.anyio

READ = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r'
READ_V2 = 'r = await mcp.filesystem.read_text_file(path="/data/config.json")\nreturn r["args"]'
DOUBLE = 'return {"double": args.get("n", 2) * 2}'
ROW = re.compile(r'<td class="name">\s*<a href="/ui/capabilities/([^"]+)"[^>]*>([^<]*)</a>')
COUNT = re.compile(r'id="count">\s*(?:Best matches for “[^”]*”: )?(\d+)–(\d+) of (\d+)')
STATIC = Path(__file__).parents[2] / "src" / "pml" / "web" / "static"


async def learn_two(web: WebHarness) -> tuple[str, str]:
    """The agent runs two snippets: a named file reader and an unnamed doubler."""
    failed, reader = await web.pg.execute(
        code=READ, intent="read the config file", name="fs:read_config"
    )
    assert not failed, reader
    failed, doubler = await web.pg.execute(code=DOUBLE, intent="double a number")
    assert not failed, doubler
    await web.pg.gateway.executor.flush()
    return reader["capabilityFqdn"], doubler["capabilityFqdn"]


def rows(page: httpx.Response) -> list[tuple[str, str]]:
    """(fqdn, shown name) of each listed capability, in order."""
    return [(fqdn, html.unescape(name)) for fqdn, name in ROW.findall(page.text)]


def counted(page: httpx.Response) -> tuple[int, int, int]:
    match = COUNT.search(page.text)
    assert match is not None, page.text
    first, last, total = match.groups()
    return int(first), int(last), int(total)


def tools_of(web: WebHarness) -> CapTools:
    return CapTools(web.pg.gateway.registry)


async def record(web: WebHarness, fqdn: str) -> dict[str, Any]:
    return await tools_of(web).whois(SCOPE, {"fqdn": fqdn})


async def test_the_list_shows_the_items_and_total_of_the_api_and_cap_list(
    web: WebHarness,
) -> None:
    reader, doubler = await learn_two(web)
    await web.pg.execute(capability="fs:read_config", intent="read it again")
    await web.pg.gateway.executor.flush()
    page = await web.get("/ui/capabilities")
    api = await web.http.get(
        "/api/capabilities", headers={"Authorization": f"Bearer {web.admin_key}"}
    )
    listed = await tools_of(web).list(SCOPE, {})
    assert page.status_code == 200
    assert api.status_code == 200
    shown = [fqdn for fqdn, _ in rows(page)]
    assert shown == [item["fqdn"] for item in api.json()["items"]]
    assert shown == [item["fqdn"] for item in listed["items"]] == [reader, doubler]
    assert counted(page) == (1, 2, api.json()["total"])
    assert [name for _, name in rows(page)] == [
        "fs:read_config",
        listed["items"][1]["display_name"],
    ]
    assert ">2</td>" in page.text  # the reader's usage count
    assert 'class="vis vis-project">project<' in page.text


async def test_the_pager_walks_the_list_with_previous_and_next_links(web: WebHarness) -> None:
    await learn_two(web)
    everything = [fqdn for fqdn, _ in rows(await web.get("/ui/capabilities"))]
    assert len(everything) == 2
    first = await web.get("/ui/capabilities", limit="1")
    assert [fqdn for fqdn, _ in rows(first)] == everything[:1]
    assert counted(first) == (1, 1, 2)
    assert 'href="/ui/capabilities?limit=1&amp;offset=1" rel="next"' in first.text
    assert 'rel="prev"' not in first.text
    second = await web.get("/ui/capabilities", limit="1", offset="1")
    assert [fqdn for fqdn, _ in rows(second)] == everything[1:]
    assert counted(second) == (2, 2, 2)
    assert 'href="/ui/capabilities?limit=1" rel="prev"' in second.text
    assert 'rel="next"' not in second.text


async def test_a_search_ranks_the_matching_capability_first(web: WebHarness) -> None:
    reader, doubler = await learn_two(web)
    for query, best in (("read the config file", reader), ("double a number", doubler)):
        page = await web.get("/ui/capabilities", q=query)
        assert page.status_code == 200
        found = [fqdn for fqdn, _ in rows(page)]
        assert found[0] == best, (query, found)
        assert "Best matches for" in page.text
        discovered = await web.pg.gateway.discovery.discover(
            SCOPE, query, kind="capability", limit=50
        )
        assert found == [hit["fqdn"] for hit in discovered]


async def test_a_persons_search_is_not_audited_as_an_agents_discovery(web: WebHarness) -> None:
    await learn_two(web)
    before = await web.pg.events("ROUTER_OUTPUT")
    page = await web.get("/ui/capabilities", q="read the config file")
    assert page.status_code == 200
    assert await web.pg.events("ROUTER_OUTPUT") == before


async def test_filters_keep_one_visibility_or_named_capabilities_only(web: WebHarness) -> None:
    reader, doubler = await learn_two(web)
    await web.pg.gateway.registry.rename(SCOPE, doubler, RenameChanges(visibility="org"))
    org_only = await web.get("/ui/capabilities", visibility="org")
    assert [fqdn for fqdn, _ in rows(org_only)] == [doubler]
    named = await web.get("/ui/capabilities", named_only="1")
    assert [fqdn for fqdn, _ in rows(named)] == [reader]
    searched = await web.get("/ui/capabilities", q="double a number", named_only="1")
    assert doubler not in [fqdn for fqdn, _ in rows(searched)]
    by_name = await web.get("/ui/capabilities", sort_by="name", visibility="", q="")
    assert [name for _, name in rows(by_name)] == sorted(name for _, name in rows(by_name))


@pytest.fixture
async def without_discovery(web: WebHarness) -> AsyncGenerator[httpx.AsyncClient]:
    """The dashboard of the same gateway built without a discovery service, signed in."""
    services = replace(web_services_of(web.pg.gateway), discovery=None)
    check = as_key_check(ApiKeys(web.pg.gateway.db).principal)
    app = Starlette(routes=dashboard_routes(services, authenticate=check))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        assert (await sign_in(http, web.admin_key)).status_code == 303
        yield http


async def test_without_discovery_a_search_matches_names_and_says_so(
    web: WebHarness, without_discovery: httpx.AsyncClient
) -> None:
    reader, _ = await learn_two(web)
    page = await without_discovery.get("/ui/capabilities", params={"q": "read config"})
    assert page.status_code == 200
    assert "Search by meaning is not available here" in page.text
    assert "<code>*read*config*</code>" in page.text
    assert [fqdn for fqdn, _ in rows(page)] == [reader]
    none = await without_discovery.get("/ui/capabilities", params={"q": "double a number"})
    assert rows(none) == []
    assert "Nothing matches" in none.text


async def test_bad_query_parameters_get_a_400_page_that_says_why(web: WebHarness) -> None:
    await learn_two(web)
    bad: list[tuple[dict[str, str] | list[tuple[str, str | int | float | bool | None]], str]] = [
        ({"q": "x" * 10_000}, "q is too long"),
        ({"q": "read\x00config"}, "control characters"),
        ({"q": "a\x1b[31mred"}, "control characters"),
        ({"limit": "0"}, "limit must be a whole number from 1"),
        ({"limit": "ten"}, "limit must be"),
        ({"limit": "\uff11"}, "limit must be"),  # a fullwidth 1
        ({"limit": "99999999999999999999"}, "limit must be"),
        ({"offset": "-1"}, "offset must be"),
        ({"visibility": "secret"}, "visibility must be one of private, project, org, public"),
        ({"named_only": "maybe"}, "named_only must be"),
        ({"sort_by": "1 OR 1=1"}, "sort_by must be one of"),
        ({"sort_by": "usage; DROP TABLE capability_records"}, "sort_by is too long"),
        ({"evil": "<script>alert(1)</script>"}, "Unknown parameter"),
        ([("q", "a"), ("q", "b")], "Give q at most once"),
    ]
    for params, message in bad:
        page = await web.http.get("/ui/capabilities", params=params)
        assert page.status_code == 400, (params, page.text)
        assert message in html.unescape(page.text), params
        assert "<script>alert" not in page.text
        assert "Content-Security-Policy" in page.headers


async def test_hostile_but_valid_searches_are_answered_and_harm_nothing(web: WebHarness) -> None:
    await learn_two(web)
    before = rows(await web.get("/ui/capabilities"))
    for q in (
        "'; DROP TABLE capability_records; --",
        "<script>alert(1)</script>",
        "café ☕ 日本語 \u202eevil",
        "%_*?\\",
        "x" * 200,
    ):
        page = await web.get("/ui/capabilities", q=q)
        assert page.status_code == 200, q
        assert "<script>alert" not in page.text
    assert rows(await web.get("/ui/capabilities")) == before
    assert len(before) == 2


async def test_a_capability_page_shows_code_schema_intents_versions_and_usage(
    web: WebHarness,
) -> None:
    reader, _ = await learn_two(web)
    for _ in range(3):
        failed, _data = await web.pg.execute(capability="fs:read_config", intent="load settings")
        assert not failed
    failed, updated = await web.pg.execute(
        code=READ_V2, name="fs:read_config", update=True, intent="read config, args only"
    )
    assert not failed, updated
    await web.pg.gateway.executor.flush()
    page = await web.get(f"/ui/capabilities/{reader}")
    assert page.status_code == 200
    text = page.text
    # highlighted by Pygments, with classes only (the CSP forbids inline styles)
    assert '<div class="highlight">' in text
    assert '<span class="k">return</span>' in text
    assert " style=" not in text
    assert '<link rel="stylesheet" href="/ui/static/highlight.css">' in text
    # the parameters schema, pretty-printed, with the lifted literal
    assert '<span class="nt">&#34;path&#34;</span>' in text or '"path"' in html.unescape(text)
    assert "/data/config.json" in text
    # intents: the remembered ones (capture, calls by name, the new version), newest first
    intents = [html.unescape(found) for found in re.findall(r"<li><q>([^<]*)</q>", text)]
    assert intents == ["read config, args only", "load settings", "read the config file"]
    assert "3 runs" in text  # "load settings", asked for three times
    # versions, the newest with its diff to v1
    assert "<strong>v2</strong>" in text
    assert "<strong>v1</strong>" in text
    assert '<span class="del">-return r</span>' in text
    assert '<span class="add">+return r[&#34;args&#34;]</span>' in text
    assert '<span class="hunk">@@' in text
    # usage: the chart and the same numbers in a table
    async with web.pg.gateway.db.read() as conn:
        calls = await SqlToolUsageRepository(conn).count(
            server_id=CAPABILITY_SERVER_ID, tool_name=reader
        )
    assert calls == 3
    assert '<svg class="chart"' in text
    assert f"total {calls} calls" in text
    assert re.search(rf'<td class="num">{calls}</td><td class="num">0</td>', text)
    assert "None: it has never been renamed." in text


async def test_renaming_keeps_the_old_name_as_an_alias_and_tells_connected_clients(
    web: WebHarness,
) -> None:
    reader, _ = await learn_two(web)
    client = web.pg.client
    before = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
    assert "mcp__fs__read_config" in before
    async with client.listen(tools_list_changed=True) as changes:
        done = await web.post(f"/ui/capabilities/{reader}/rename", {"new_name": " config:load "})
        assert done.status_code == 303
        assert done.headers["location"] == f"/ui/capabilities/{reader}?notice=renamed"
        with anyio.fail_after(5):
            event = await anext(aiter(changes))
        assert isinstance(event, ToolsListChanged)
    after = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
    assert "mcp__config__load" in after
    assert "mcp__fs__read_config" not in after
    page = await web.get(done.headers["location"])
    assert '<h1 class="cap-title">config:load</h1>' in page.text
    assert "<li><code>fs:read_config</code>" in page.text
    assert "The old name still works as an alias" in page.text
    looked_up = await tools_of(web).lookup(SCOPE, {"name": "fs:read_config"})
    assert looked_up["deprecatedAlias"]["currentName"] == "config:load"
    listed = await web.get("/ui/capabilities")
    assert (reader, "config:load") in rows(listed)


async def test_a_refused_rename_shows_the_error_with_a_4xx_and_changes_nothing(
    web: WebHarness,
) -> None:
    reader, _ = await learn_two(web)
    failed, other = await web.pg.execute(
        code='return "hello"', intent="say hello", name="greet:hello"
    )
    assert not failed, other
    taken = await web.post(f"/ui/capabilities/{reader}/rename", {"new_name": "greet:hello"})
    assert taken.status_code == 409
    assert "NAME_TAKEN" in taken.text
    assert "Nothing was changed." in taken.text
    assert 'aria-invalid="true"' in taken.text
    bad = await web.post(f"/ui/capabilities/{reader}/rename", {"new_name": "no spaces <b>"})
    assert bad.status_code == 400
    assert "INVALID_NAME" in bad.text
    assert "no spaces &lt;b&gt;" in bad.text
    empty = await web.post(f"/ui/capabilities/{reader}/rename", {"new_name": ""})
    assert empty.status_code == 400
    stray = await web.post(
        f"/ui/capabilities/{reader}/rename", {"new_name": "x:y", "visibility": "public"}
    )
    assert stray.status_code == 400
    after = await record(web, reader)
    assert (after["display_name"], after["visibility"], after["aliases"]) == (
        "fs:read_config",
        "project",
        [],
    )


async def test_visibility_and_description_are_changed_and_bad_values_refused(
    web: WebHarness,
) -> None:
    reader, _ = await learn_two(web)
    shared = await web.post(f"/ui/capabilities/{reader}/visibility", {"visibility": "org"})
    assert shared.status_code == 303
    assert shared.headers["location"].endswith("?notice=visibility")
    described = await web.post(
        f"/ui/capabilities/{reader}/description",
        {"description": "Reads the app's config file <as JSON>"},
    )
    assert described.status_code == 303
    now = await record(web, reader)
    assert (now["visibility"], now["description"]) == (
        "org",
        "Reads the app's config file <as JSON>",
    )
    page = await web.get(described.headers["location"])
    assert "Description saved." in page.text
    assert "Reads the app&#39;s config file &lt;as JSON&gt;" in page.text
    assert 'id="vis-org" name="visibility" value="org" checked' in page.text
    secret = await web.post(f"/ui/capabilities/{reader}/visibility", {"visibility": "secret"})
    assert secret.status_code == 400
    assert "INVALID_INPUT" in secret.text
    too_long = await web.post(f"/ui/capabilities/{reader}/description", {"description": "d" * 4001})
    assert too_long.status_code == 400
    assert "description is too long" in too_long.text
    unchanged = await record(web, reader)
    assert (unchanged["visibility"], unchanged["description"]) == (
        now["visibility"],
        now["description"],
    )


async def test_posts_without_csrf_or_from_another_site_change_nothing(web: WebHarness) -> None:
    reader, _ = await learn_two(web)
    tokenless = await web.post(
        f"/ui/capabilities/{reader}/rename", {"new_name": "stolen"}, csrf=False
    )
    assert tokenless.status_code == 403
    forged = await web.post(
        f"/ui/capabilities/{reader}/visibility", {"visibility": "public"}, csrf=False
    )
    assert forged.status_code == 403
    cross = await web.post(
        f"/ui/capabilities/{reader}/visibility",
        {"visibility": "public"},
        origin="https://evil.example",
    )
    assert cross.status_code == 403
    after = await record(web, reader)
    assert (after["display_name"], after["visibility"]) == ("fs:read_config", "project")


@pytest.fixture
async def globex(web: WebHarness) -> AsyncGenerator[httpx.AsyncClient]:
    """Another org's admin, signed in to the same gateway."""
    key, _ = await ApiKeys(web.pg.gateway.db).create("globex", "webapp", "gus", role="admin")
    transport = httpx.ASGITransport(app=create_app(web.pg.gateway))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        assert (await sign_in(http, key)).status_code == 303
        yield http


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match is not None
    return match.group(1)


async def test_another_orgs_admin_sees_a_404_and_an_empty_list(
    web: WebHarness, globex: httpx.AsyncClient
) -> None:
    reader, doubler = await learn_two(web)
    listed = await globex.get("/ui/capabilities")
    assert listed.status_code == 200
    assert rows(listed) == []
    assert "No capabilities yet." in listed.text
    searched = await globex.get("/ui/capabilities", params={"q": "read the config file"})
    assert rows(searched) == []
    for fqdn in (reader, doubler):
        page = await globex.get(f"/ui/capabilities/{fqdn}")
        assert page.status_code == 404
        assert "read_text_file" not in page.text
    token = csrf_of(listed)
    post = await globex.post(
        f"/ui/capabilities/{reader}/rename",
        data={"csrf": token, "new_name": "globex:mine"},
        headers={"Origin": BASE},
    )
    assert post.status_code == 404
    assert (await record(web, reader))["display_name"] == "fs:read_config"


async def test_a_public_capability_of_another_org_is_shown_read_only(
    web: WebHarness, globex: httpx.AsyncClient
) -> None:
    reader, _ = await learn_two(web)
    await web.pg.gateway.registry.rename(SCOPE, reader, RenameChanges(visibility="public"))
    page = await globex.get(f"/ui/capabilities/{reader}")
    assert page.status_code == 200
    assert "can be changed only from there" in page.text
    assert f'action="/ui/capabilities/{reader}/rename"' not in page.text
    listed = await globex.get("/ui/capabilities")
    token = csrf_of(listed)
    refused = await globex.post(
        f"/ui/capabilities/{reader}/visibility",
        data={"csrf": token, "visibility": "private"},
        headers={"Origin": BASE},
    )
    assert refused.status_code == 403
    assert "PERMISSION_DENIED" in refused.text
    assert (await record(web, reader))["visibility"] == "public"
    other = Scope("globex", "webapp", "gus")
    assert (await tools_of(web).whois(other, {"fqdn": reader}))["visibility"] == "public"


async def test_hostile_capability_paths_get_a_400_or_404_page(web: WebHarness) -> None:
    reader, _ = await learn_two(web)
    hostile = [  # percent-encoded where a client would resolve the dots itself
        "%2e%2e",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "acme.webapp.fs.%2e%2e.fb01",
        "%00",
        f"{reader}%00",
        "x" * 5_000,
        "a." * 2_500,
        "日本.語.ク.ラ.ス",
        "acme.webapp.fs.read_config.zzzz",
        "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "acme.webapp.fs.read_config.fb01'; DROP TABLE capability_records; --",
        "a/b/c",
    ]
    for path in hostile:
        page = await web.http.get(f"/ui/capabilities/{path}")
        assert page.status_code in (400, 404), (path, page.status_code)
        assert "<script>alert" not in page.text
        assert "\x00" not in page.text
        post = await web.http.post(
            f"/ui/capabilities/{path}/rename",
            data={"csrf": web.csrf, "new_name": "x"},
            headers={"Origin": BASE},
        )
        assert post.status_code in (400, 404), (path, post.status_code)
    missing = await web.get("/ui/capabilities/acme.webapp.fs.nothing.abcd")
    assert missing.status_code == 404
    assert "Capability not found" in missing.text
    assert (await record(web, reader))["display_name"] == "fs:read_config"


async def test_a_notice_is_one_the_page_knows_or_a_400(web: WebHarness) -> None:
    reader, _ = await learn_two(web)
    known = await web.get(f"/ui/capabilities/{reader}", notice="renamed")
    assert known.status_code == 200
    unknown = await web.get(f"/ui/capabilities/{reader}", notice="<b>pwned</b>")
    assert unknown.status_code == 400
    assert "<b>pwned" not in unknown.text
    extra = await web.get(f"/ui/capabilities/{reader}", debug="1")
    assert extra.status_code == 400


def test_the_highlight_stylesheet_holds_the_colours_the_code_is_highlighted_with() -> None:
    assert (STATIC / "highlight.css").read_text() == highlight_stylesheet()


def test_code_and_diffs_show_invisible_and_bidi_characters_as_escapes() -> None:
    from pml.web.dashboard.code_view import code_html, diff_lines, json_html

    trojan = 'access = "user\u202e \u2066# admin\u2069 \u2066"\nif ok:\n\treturn\u200b 1'
    shown = re.sub(r"<[^>]+>", "", str(code_html(trojan)))  # the text a person reads
    for hidden in ("\u202e", "\u2066", "\u2069", "\u200b"):
        assert hidden not in shown
    assert "\\u202e" in shown
    assert "\\u200b" in shown
    assert shown.count("\n") >= 3  # lines and tabs are kept
    assert "\u202e" not in str(json_html({"k": "a\u202eb"}))
    [line] = diff_lines("+x = '\u2067'")
    assert (line.kind, line.text) == ("add", "+x = '\\u2067'")
