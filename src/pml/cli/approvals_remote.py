"""The ``/api/approvals`` client of ``pml approvals --server URL --api-key KEY`` (SPEC §11).

    desk = RemoteDesk.of("https://pml.example.com", key)
    await desk.pending()                     # [{"workflowId": "wf_...", ...}, ...]
    await desk.show("wf_3f2a...")            # one view
    await desk.decide("wf_3f2a...", "session")   # "deny" | "once" | "session" | "always"

Every answer is checked before it is used: a refused connection, a timeout, or an answer
that is not the API's JSON is ``UPSTREAM_UNAVAILABLE`` naming the URL; the API's own errors
(``UNAUTHORIZED``, ``FORBIDDEN`` for an agent key, ``NOT_FOUND``, ``ALREADY_DECIDED``...)
come back as their ``PmlError`` with the server's message made safe to print. ``httpx`` is
imported only when a request is made.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from pml.cli.status_cmd import safe_text
from pml.errors import (
    Forbidden,
    InvalidInput,
    PmlError,
    Unauthorized,
    UpstreamUnavailable,
    error_from_dict,
)

MAX_KEY_CHARS = 512
MAX_URL_CHARS = 2048
TIMEOUT_S = 15.0
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
GRANTS = ("once", "session", "always")


def safe_line(value: object, limit: int = 300) -> str:
    """``value`` as one printable line (control and bidi characters escaped), cut at ``limit``."""
    text = safe_text(value).plain
    return text if len(text) <= limit else text[:limit] + "…"


def check_id(workflow_id: str) -> str:
    """A workflow id as PML writes them (``wf_`` + hex), else ``INVALID_INPUT``."""
    if not ID_PATTERN.fullmatch(workflow_id):
        shown = safe_line(workflow_id, 40) if workflow_id else "(empty)"
        raise InvalidInput(
            f"Not an approval id: {shown} (ids look like wf_3f2a...; see `pml approvals list`)",
            field="workflow_id",
        )
    return workflow_id


def check_grant(grant: str) -> str:
    """``once``, ``session`` or ``always``, else ``INVALID_INPUT`` naming them."""
    if grant not in GRANTS:
        raise InvalidInput(
            f"--grant must be one of: {', '.join(GRANTS)} (not {safe_line(grant, 40)})",
            field="grant",
        )
    return grant


def base_url(server: str) -> str:
    """``server`` as the PML's base URL (``/mcp`` and trailing slashes dropped)."""
    shown = safe_line(server, 120)
    if len(server) > MAX_URL_CHARS or not server.isascii() or not server.isprintable():
        raise InvalidInput(f"--server must be http(s)://host[:port]: {shown}", field="server")
    base = server.rstrip("/")
    try:
        parts = urlsplit(base)
        host, _port = parts.hostname, parts.port  # a port that is not a number raises
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise InvalidInput(f"--server must be http(s)://host[:port]: {shown}", field="server")
    if parts.query or parts.fragment or parts.username or parts.password or " " in base:
        raise InvalidInput(
            f"--server takes no credentials, query or fragment: {shown}", field="server"
        )
    return base.removesuffix("/mcp")


def check_key(api_key: str) -> str:
    """The key as it goes in the ``Authorization`` header (printable ASCII, no spaces)."""
    key = api_key.strip()
    if (
        not key
        or len(key) > MAX_KEY_CHARS
        or not (key.isascii() and key.isprintable())
        or " " in key
    ):
        raise InvalidInput("--api-key: not an API key", field="api_key")
    return key


@dataclass(frozen=True, slots=True)
class RemoteDesk:
    """The approvals of a shared PML, as its admin key sees them."""

    base: str
    api_key: str

    @classmethod
    def of(cls, server: str, api_key: str) -> RemoteDesk:
        """Checked ``--server`` and ``--api-key`` (``INVALID_INPUT`` before any request)."""
        return cls(base_url(server), check_key(api_key))

    async def pending(self) -> list[dict[str, Any]]:
        answer = await self._request("GET", "")
        items = answer.get("items")
        if not isinstance(items, list):
            raise self._garbled("no items")
        views = cast(list[object], items)
        if not all(isinstance(item, dict) for item in views):
            raise self._garbled("an item is not an object")
        return cast(list[dict[str, Any]], views)

    async def show(self, workflow_id: str) -> dict[str, Any]:
        return await self._request("GET", f"/{check_id(workflow_id)}")

    async def decide(self, workflow_id: str, decision: str) -> dict[str, Any]:
        body: dict[str, Any] = (
            {"approved": False}
            if decision == "deny"
            else {"approved": True, "grant": check_grant(decision)}
        )
        return await self._request("POST", f"/{check_id(workflow_id)}", body)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One request (ids are checked: they never change the path)."""
        import httpx

        url = f"{self.base}/api/approvals{path}"
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"}
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as http:
                response = await http.request(method, url, headers=headers, json=body)
        except httpx.ConnectError:
            raise UpstreamUnavailable(
                f"Cannot reach the PML at {safe_line(self.base)}: connection refused or "
                "host unknown (is `pml serve --http` running there?)",
                url=self.base,
            ) from None
        except httpx.TimeoutException:
            raise UpstreamUnavailable(
                f"The PML at {safe_line(self.base)} did not answer within {TIMEOUT_S:g} s",
                url=self.base,
            ) from None
        except httpx.HTTPError as error:
            raise UpstreamUnavailable(
                f"Request to {safe_line(self.base)} failed: {safe_line(type(error).__name__)}",
                url=self.base,
            ) from None
        return self._answer(response.status_code, response.content)

    def _answer(self, status: int, content: bytes) -> dict[str, Any]:
        try:
            data: object = json.loads(content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            data = None
        if not isinstance(data, dict):
            if status == 401:
                raise Unauthorized("The PML refused the API key (401)")
            if status == 403:
                raise Forbidden("The PML refused: this needs an admin API key (403)")
            raise self._garbled(f"HTTP {status}, not JSON")
        answer = cast(dict[str, Any], data)
        if status == 200 and answer.get("status") != "error":
            return answer
        error = answer.get("error")
        if not isinstance(error, dict):
            raise self._garbled(f"HTTP {status} without an error object")
        found = error_from_dict(cast(dict[str, Any], error))
        raise type(found)(safe_line(found.message), http_status=status)

    def _garbled(self, what: str) -> PmlError:
        return UpstreamUnavailable(
            f"{safe_line(self.base)} did not answer like a PML approvals API ({what}); "
            "check --server",
            url=self.base,
        )
