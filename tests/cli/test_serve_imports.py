"""``pml serve --stdio`` loads only what serving needs: no table printer (rich), no HTTP
client CLI (httpx, pygments), no dashboard (jinja2), no migration tool (alembic, mako) on
a database already at head, no JSON Schema validator before a capability runs, and on the
hashing embedder none of the embedding model's runtime (onnxruntime, tokenizers).

The real console script is started as an MCP client starts it, with
``PYTHONPROFILEIMPORTTIME`` set: every module the process imports is one line on its
stderr, read here after a ``tools/list``.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from pml.registry.scope import Principal, Scope
from pml.storage.dashboard_session_repo import purge_expired_dashboard_sessions
from pml.storage.database import SHIPPED_HEAD, Database
from pml.storage.tables import dashboard_sessions
from pml.web.dashboard.sessions import SessionStore, token_hash

PML = Path(sys.executable).parent / "pml"
WAIT_S = 60.0
# Top-level packages (and pml's dashboard) the serving process must not load; the config
# below picks the hashing embedder, so the model's runtime is among them.
NOT_SERVING = ("rich", "pygments", "httpx", "jinja2", "alembic", "mako", "jsonschema")
MODEL_RUNTIME = ("onnxruntime", "tokenizers")
DASHBOARD = "pml.web.dashboard"


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "pml.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "pml.db"}"\n'
        '[scope]\norg = "acme"\nproject = "imports"\n'
        '[discovery]\nembedder = "hashing"\n',
        encoding="utf-8",
    )
    return config


def _imported(log: str) -> set[str]:
    """The modules named by ``-X importtime`` lines (``import time: us | us | name``)."""
    names: set[str] = set()
    for line in log.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _loaded_of(modules: set[str], package: str) -> list[str]:
    return sorted(name for name in modules if name == package or name.startswith(package + "."))


async def _serve_and_list(tmp_path: Path) -> tuple[set[str], set[str]]:
    """The tools a real ``pml serve --stdio`` lists and the modules it imported by then."""
    config = _config(tmp_path)
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("PML_")},
        "PYTHONPROFILEIMPORTTIME": "1",
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
    }
    params = StdioServerParameters(
        command=str(PML), args=["--config", str(config), "serve", "--stdio"], env=env, cwd=tmp_path
    )
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog, anyio.fail_after(WAIT_S):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
    return tools, _imported(log.read_text(encoding="utf-8", errors="replace"))


@pytest.mark.anyio
async def test_a_stdio_gateway_on_a_migrated_database_loads_no_cli_dashboard_or_migrations(
    tmp_path: Path,
) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'pml.db'}")
    try:
        assert await db.current_revision() == SHIPPED_HEAD
    finally:
        await db.close()

    tools, modules = await _serve_and_list(tmp_path)

    assert {"pml_discover", "pml_execute"} <= tools
    assert {"pml.gateway.serve_stdio", "mcp", "sqlalchemy"} <= modules  # the log was read
    unused = (*NOT_SERVING, *MODEL_RUNTIME, DASHBOARD)
    loaded = {package: _loaded_of(modules, package) for package in unused}
    assert {package: found for package, found in loaded.items() if found} == {}


@pytest.mark.anyio
async def test_a_blank_database_is_migrated_at_start_with_alembic(tmp_path: Path) -> None:
    tools, modules = await _serve_and_list(tmp_path)

    assert "pml_discover" in tools
    assert "alembic.command" in modules
    db = await Database.open(f"sqlite:///{tmp_path / 'pml.db'}", migrate=False)
    try:
        assert await db.current_revision() == SHIPPED_HEAD
    finally:
        await db.close()


async def _session_hashes(db: Database) -> set[str]:
    async with db.read() as conn:
        rows = (await conn.execute(sa.select(dashboard_sessions.c.token_hash))).all()
    return {row.token_hash for row in rows}


@pytest.mark.anyio
async def test_the_gateway_purges_expired_dashboard_sessions_only(db: Database) -> None:
    principal = Principal(Scope("acme", "imports", "ada"), "admin")
    live = await SessionStore(db).create(principal)
    expired = await SessionStore(db, ttl=timedelta(seconds=-1)).create(principal)
    assert await _session_hashes(db) == {token_hash(live), token_hash(expired)}

    assert await purge_expired_dashboard_sessions(db) == 1

    assert await _session_hashes(db) == {token_hash(live)}
    found = await SessionStore(db).find(live)
    assert found is not None
    assert found.principal.scope.user == "ada"
    assert await purge_expired_dashboard_sessions(db) == 0
