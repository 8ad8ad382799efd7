"""Both sides of ``pml connect``, in-process: a shared gateway and this machine.

    async with open_machine(tmp_path) as machine:      # this machine: server "files"
        run = await machine.runner.run({"workflowId": "wf_1", "code": READ})
    async with open_shared(tmp_path) as shared:        # the gateway (servers "a", not "files")
        async with running_http(shared.gateway) as url: ...

The gateway runs its own in-process upstream ``a`` and is configured with ``[routing] local =
["files"]``: it never runs ``files``, which only this machine's pool runs (an in-process
``Upstream`` too, so each side's call log shows who ran what). Both sides allow every tool
(``*:*``) unless a test passes its own ``[permissions]``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from gateway.upstreams import Upstream
from pml.client.runner import LocalRunner
from pml.config import Settings
from pml.gateway.keys import ApiKeys
from pml.gateway.policy_services import PolicyServices, open_policy
from pml.gateway.server import Gateway, open_gateway
from pml.registry.service import CapabilityRegistry
from pml.sandbox.monty import MontyEngine
from pml.storage.database import Database
from pml.upstream.pool import ClientPool
from pml.wiring import routing_rules, scope_of

LOCAL = "files"  # the server only this machine runs
ECHO_LOCAL = f'return await mcp.{LOCAL}.echo(text=args.get("text", "hi"))'
ECHO_GATEWAY = 'return await mcp.a.echo(text="on the gateway")'


def settings_for(folder: Path, **sections: Any) -> Settings:
    """acme/webapp/alice on an SQLite file in ``folder``, every tool allowed, the hashing
    embedder; ``sections`` replace or add settings (``routing={...}``)."""
    folder.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "database_url": f"sqlite:///{folder / 'pml.db'}",
        "scope": {"org": "acme", "project": "webapp", "user": "alice"},
        "permissions": {"allow": ["*:*"]},
        "discovery": {"embedder": "hashing"},
        **sections,
    }
    return Settings.model_validate(data)


async def settle_audit(policy: PolicyServices) -> None:
    """Write the audit events still pending before the audit log stops.

    The audit log's periodic writer is cancelled when it stops; cancelled in the middle of
    a database write, SQLAlchemy leaves a task closing that connection behind, which can
    outlive the event loop's worker threads and hang its shutdown. Nothing pending: nothing
    for it to be writing then."""
    with anyio.CancelScope(shield=True), anyio.fail_after(10):
        await policy.audit.flush()


@dataclass
class Shared:
    """The shared gateway, its own upstream ``a``, and alice's API key."""

    gateway: Gateway
    upstream: Upstream
    key: str


@asynccontextmanager
async def open_shared(folder: Path, **sections: Any) -> AsyncGenerator[Shared]:
    """The gateway on ``folder``: runs ``a`` itself; ``files`` is left to PML clients."""
    upstream = Upstream("a")
    sections.setdefault("routing", {"local": [LOCAL]})
    settings = settings_for(folder, **sections)
    pool = ClientPool({"a": upstream.server})
    async with open_gateway(settings, pool=pool) as gateway:
        key, _ = await ApiKeys(gateway.db).create("acme", "webapp", "alice")
        try:
            yield Shared(gateway, upstream, key)
        finally:
            await settle_audit(gateway.policy)


@dataclass
class Machine:
    """This machine: its ``files`` server, its database, its enforcement point (grants,
    audit) and the runner over them."""

    upstream: Upstream
    runner: LocalRunner
    db: Database
    registry: CapabilityRegistry
    policy: PolicyServices
    settings: Settings


@asynccontextmanager
async def open_machine(folder: Path, **sections: Any) -> AsyncGenerator[Machine]:
    """This machine's servers, sandbox and enforcement point, as ``pml connect`` opens them
    (``pml.client.serve.open_runner``), with ``files`` in-process."""
    upstream = Upstream(LOCAL)
    settings = settings_for(folder, **sections)
    db = await Database.open(settings.database_url)
    try:
        registry = CapabilityRegistry(db, routing=routing_rules(settings))
        async with (
            ClientPool({LOCAL: upstream.server}) as pool,
            MontyEngine() as engine,
            open_policy(settings, db, None) as policy,
        ):
            runner = LocalRunner(
                pool=pool,
                engine=engine,
                registry=registry,
                limits=settings.sandbox,
                scope=scope_of(settings),
                policy=policy.enforcer,
            )
            try:
                yield Machine(upstream, runner, db, registry, policy, settings)
            finally:
                await settle_audit(policy)
    finally:
        await db.close()
