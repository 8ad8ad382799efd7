"""Building an agent on an open gateway: the same services every other path uses.

    async with open_gateway(settings, llm_api_key=key) as gateway:
        parts = agent_parts(gateway, llm=router_llm)
        agent = Agent(parts, model, person, display, settings=settings.agent)

Tool calls go through the gateway's enforcer, its pool and its ``pml_execute`` service;
approvals are decided on its approval desk (``decided_by = "terminal:pml agent"``), grants
issued by its grant service; memory goes to the gateway's database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pml.agent.dispatch import DECIDED_BY, RunnerParts, result_text
from pml.agent.model import Decision
from pml.agent.offer import OfferParts, capability_tool_rows
from pml.agent.posthook import MemoryPostHook
from pml.agent.turn import AgentParts
from pml.gateway.schemas import STATIC_TOOLS, ExecuteParams
from pml.llm import JsonCompleter
from pml.memory.store import MemoryStore
from pml.registry.scope import Scope
from pml.registry.tools import parse_params

if TYPE_CHECKING:
    from pml.gateway.server import Gateway

TERMINAL_PURPOSE = "approved at the terminal (pml agent)"


def agent_parts(gateway: Gateway, *, llm: JsonCompleter | None = None) -> AgentParts:
    """The parts of a turn for the gateway's default scope (the person running it)."""
    scope = gateway.default_scope
    policy = gateway.policy
    enforcer = policy.enforcer
    desk = policy.approvals.desk
    store = MemoryStore(gateway.db)

    async def execute(arguments: dict[str, Any]) -> dict[str, Any]:
        return await gateway.executor.execute(scope, parse_params(ExecuteParams, arguments))

    async def decide(workflow_id: str, choice: Decision) -> None:
        await desk.decide(
            workflow_id,
            choice,
            org=scope.org,
            project=scope.project,
            user=scope.user,
            decided_by=DECIDED_BY,
            actor=scope.user,
        )

    async def grant(call: dict[str, Any], choice: Decision) -> None:
        if choice != "deny":
            await desk.issue_grant(scope, call, choice, DECIDED_BY, scope.user, TERMINAL_PURPOSE)

    async def discover(arguments: dict[str, Any]) -> str:
        result = await gateway.tools.call_tool(scope, "pml_discover", arguments)
        return result_text(result.content, result.structured_content)

    async def capability_tools(
        caller: Scope,
    ) -> list[tuple[str, str, Mapping[str, Any], str, list[str]]]:
        listing = await gateway.catalog.listing(caller)
        named: dict[str, tuple[str, Mapping[str, Any], str]] = {}
        for tool in listing.tools:
            fqdn = listing.fqdn_of(tool.name)
            if fqdn is not None:
                named[tool.name] = (tool.description or "", tool.input_schema, fqdn)
        return await capability_tool_rows(gateway.db, named)

    async def recall(caller: Scope, count: int) -> list[str]:
        facts = await store.recent(caller, count)
        return [fact.text for fact in facts if fact.sensitivity == "low"]

    static = {
        name: (tool.description or "", json.loads(json.dumps(tool.input_schema)))
        for name, tool in STATIC_TOOLS.items()
        if name in ("pml_discover", "pml_execute")
    }
    settings = gateway.settings
    return AgentParts(
        scope=scope,
        enforcer=enforcer,
        offer=OfferParts(gateway.window, enforcer, capability_tools, static),
        runner=RunnerParts(
            gateway.pool,
            enforcer,
            execute,
            decide,
            grant,
            discover,
            covers=lambda tool: desk.covers(tool, scope),
        ),
        posthook=MemoryPostHook(
            store,
            enforcer,
            gateway.pool,
            grant,
            settings.memory,
            llm=llm,
            model=settings.llm.model if settings.llm is not None else "llm",
        ),
        recall=recall,
        min_confidence=settings.policy.llm_min_confidence,
        memory_prefetch=settings.memory.prefetch,
    )
