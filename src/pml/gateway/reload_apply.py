"""Applying a reloaded config to an open gateway: build everything first, then swap it in.

    prepared = prepare(gateway, new_settings, settings_diff(gateway.settings, new_settings))
    changes = await apply_settings(gateway, prepared)      # PoolChanges of the server list

``prepare`` raises (``CONFIG_ERROR`` ...) before anything changed; ``apply_settings`` swaps
the new rules into the objects the gateway shares (the one enforcer, the approval flow and
its desk, the registry, discovery, the execute service and its hand-off, the offline trace
contexts), then moves the pool, the registry's server records and stored routing along,
and tells connected clients to list their tools again. A failure there is logged, and what
was swapped in stays.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pml.config import Settings
from pml.errors import PmlError
from pml.gateway.reload import RESTART_KEYS, ReconfigurablePool, SettingsDiff
from pml.gateway.services import register_servers
from pml.policy.capability_map import CapabilityMap
from pml.policy.gate import PolicyGate
from pml.policy.permissions import PermissionRules
from pml.policy.version import policy_version
from pml.registry.models import RoutingRules
from pml.registry.routing_start import routing_at_start
from pml.upstream.pool import PoolChanges
from pml.upstream.transport import UpstreamTarget
from pml.wiring import routing_rules

if TYPE_CHECKING:
    from pml.gateway.server import Gateway

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PolicyParts:
    """The enforcer's new rules, and the version grants are bound to."""

    gate: PolicyGate
    capabilities: CapabilityMap
    rules: PermissionRules
    version: str


@dataclass(frozen=True, slots=True)
class Prepared:
    """A reload ready to apply: the new settings and what was built from them."""

    new: Settings
    diff: SettingsDiff
    applied: tuple[str, ...]
    restart: tuple[str, ...]
    routing: RoutingRules
    policy: PolicyParts | None
    servers: dict[str, UpstreamTarget] | None  # the pool's whole new list


def prepare(gateway: Gateway, new: Settings, diff: SettingsDiff) -> Prepared:
    """Build what the reload swaps in; raises a ``PmlError`` (and changes nothing) when the
    new settings cannot be used."""
    old = gateway.settings
    restart = list(diff.restart)
    applied = [name for name in diff.live if _beyond_restart_keys(old, new, name)]
    policy: PolicyParts | None = None
    if diff.touches("policy", "permissions"):
        policy = PolicyParts(
            gate=PolicyGate(new.policy, version=policy_version(new)),
            capabilities=CapabilityMap.from_settings(new.policy),
            rules=PermissionRules.from_settings(new.permissions),
            version=policy_version(new),
        )
    servers: dict[str, UpstreamTarget] | None = None
    if diff.touches("servers", "servers_file", "upstream"):
        pool = gateway.pool
        if isinstance(pool, ReconfigurablePool):
            # Servers the pool was given besides the config (in-process ones) stay.
            given = {name: t for name, t in pool.targets().items() if name not in old.servers}
            servers = {**given, **new.servers}
        else:
            moved = [name for name in applied if name in ("servers", "servers_file", "upstream")]
            restart.extend(moved)
            applied = [name for name in applied if name not in moved]
    return Prepared(
        new=new,
        diff=diff,
        applied=tuple(applied),
        restart=tuple(restart),
        routing=routing_rules(new),
        policy=policy,
        servers=servers,
    )


def _beyond_restart_keys(old: Settings, new: Settings, section: str) -> bool:
    keys = set(RESTART_KEYS.get(section, ()))
    if not keys:
        return True
    before: Any = getattr(old, section)
    after: Any = getattr(new, section)
    return before.model_dump(exclude=keys) != after.model_dump(exclude=keys)


async def apply_settings(gateway: Gateway, prepared: Prepared) -> PoolChanges:
    """Swap the prepared settings in, move the pool and stored routing, notify clients."""
    new, diff = prepared.new, prepared.diff
    if prepared.policy is not None:
        parts = prepared.policy
        policy = gateway.policy
        policy.enforcer.reconfigure(
            gate=parts.gate,
            capabilities=parts.capabilities,
            rules=parts.rules,
            mode=new.policy.mode,
        )
        policy.grants.policy_version = parts.version  # grants follow the policy they were for
        policy.approvals.reconfigure(new.permissions)
    gateway.registry.capabilities_per_project = new.limits.capabilities_per_project
    if diff.touches("routing", "sandbox"):
        _swap_routing_and_limits(gateway, new, prepared.routing)
    if diff.touches("log"):
        from pml.telemetry import logs

        logs.configure(new.log)
    changes = PoolChanges()
    if prepared.servers is not None and isinstance(gateway.pool, ReconfigurablePool):
        try:
            changes = await gateway.pool.reconfigure(prepared.servers, settings=new.upstream)
        except PmlError as error:
            logger.error("reload: the upstream servers were not changed: %s", error.message)
    if _routing_patterns_changed(gateway.settings, new) or changes:
        await register_servers(gateway.registry, new, gateway.default_scope)
    if _routing_patterns_changed(gateway.settings, new):
        await routing_at_start(gateway.db, new, trigger="reload")  # logs its own failures
    if changes:
        try:
            await gateway.discovery.refresh(force=True)
        except PmlError as error:
            logger.warning("reload: discovery not refreshed: %s", error.message)
    if prepared.applied:
        await gateway.notify_tools_changed()
    return changes


def _routing_patterns_changed(old: Settings, new: Settings) -> bool:
    return routing_rules(old) != routing_rules(new)


def _swap_routing_and_limits(gateway: Gateway, new: Settings, rules: RoutingRules) -> None:
    from pml.execution.handoff import OfflineContexts
    from pml.execution.service import ExecuteService

    gateway.registry.routing = rules
    gateway.discovery.routing = rules
    executor = gateway.executor
    if isinstance(executor, ExecuteService):
        executor.reconfigure(new.sandbox, routing=rules, workflow_ttl_s=new.routing.workflow_ttl_s)
    offline = gateway.traces.offline
    if isinstance(offline, OfflineContexts):
        offline.routing = rules
        offline.max_code_bytes = new.sandbox.max_code_bytes
