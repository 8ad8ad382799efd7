"""Handing a run to the PML client that asked for it: ``execute_locally`` (SPEC §9).

    handoff = ClientHandoff(workflows, ttl_s=3600, routing=RoutingRules(), policy=enforcer)
    answer = await handoff.direct(scope, params, analysis, plan, request)
    answer["status"], answer["workflowId"], answer["clientTools"]   # "execute_locally", ...
    context = LearningContext.from_state(await workflows.get(answer["workflowId"], ...))

When the code of a ``pml_execute`` (or a capability called by name) uses servers the calling
PML client runs on the user's machine, the gateway does not run it: it keeps the *learning
context* — what it needs to capture the capability once the client reports a successful
run (code, intent, code hash, the references it resolved, tools used, the requested name,
update flag and routing, the caller's scope) — in the workflow-state store for
``ttl_s`` (default one hour), and answers the code for the client to run. The client's
trace (``POST /api/traces``, ``pml.execution.trace_ingest``) ends the workflow.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from pml.analysis.snippet import SnippetAnalysis
from pml.errors import InvalidInput
from pml.execution.answers import analysis_of
from pml.execution.clients import ClientCaller
from pml.execution.references import Plan, Target, plan_references, upstream_tools
from pml.execution.values import check_args, merged_args
from pml.gateway.schemas import ExecuteParams
from pml.policy.enforcer import PolicyEnforcer, RequestPolicy
from pml.registry.models import Resolved, RoutingRules
from pml.registry.scope import Scope
from pml.registry.service import CapabilityRegistry
from pml.storage.workflow_repo import WorkflowStateStore
from pml.upstream.base import UpstreamPool

CLIENT_RUN_KIND = "client_run"
CONTEXT_VERSION = 1
DEFAULT_TTL_S = 3600.0


@dataclass(frozen=True, slots=True)
class LearningContext:
    """What the gateway keeps between ``execute_locally`` and the client's trace."""

    mode: str  # "direct": learn the code; "capability": count a use of ``capability``
    code: str
    intent: str
    code_hash: str
    targets: dict[tuple[str, str], Target]
    tools_used: list[str]
    name: str | None = None
    update: bool = False
    routing: str | None = None
    capability: str | None = None
    version_tag: str | None = None

    @property
    def plan(self) -> Plan:
        return Plan(dict(self.targets))

    @classmethod
    def of_request(
        cls, params: ExecuteParams, analysis: SnippetAnalysis, plan: Plan
    ) -> LearningContext:
        """The context of a ``pml_execute`` with code (its success becomes a capability)."""
        assert params.code is not None
        return cls(
            mode="direct",
            code=params.code,
            intent=params.intent,
            code_hash=analysis.code_hash,
            targets=dict(plan.targets),
            tools_used=[target.address for target in plan.targets.values()],
            name=params.name,
            update=params.update,
            routing=params.routing,
            version_tag=params.version_tag,
        )

    def to_state(self) -> dict[str, Any]:
        targets = [
            [key[0], key[1], t.kind, t.server, t.tool, t.fqdn, t.on_client]
            for key, t in self.targets.items()
        ]
        return {
            "v": CONTEXT_VERSION,
            "mode": self.mode,
            "code": self.code,
            "intent": self.intent,
            "codeHash": self.code_hash,
            "targets": targets,
            "toolsUsed": self.tools_used,
            "name": self.name,
            "update": self.update,
            "routing": self.routing,
            "capability": self.capability,
            "versionTag": self.version_tag,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LearningContext | None:
        """The context a state holds (None: not one this version wrote)."""
        if state.get("v") != CONTEXT_VERSION or state.get("mode") not in ("direct", "capability"):
            return None
        try:
            rows = cast(list[list[Any]], state["targets"])
            targets = {
                (str(row[0]), str(row[1])): Target(
                    "capability" if row[2] == "capability" else "tool",
                    server=str(row[3]),
                    tool=str(row[4]),
                    fqdn=str(row[5]),
                    on_client=bool(row[6]),
                )
                for row in rows
            }
            return cls(
                mode=str(state["mode"]),
                code=str(state["code"]),
                intent=str(state["intent"]),
                code_hash=str(state["codeHash"]),
                targets=targets,
                tools_used=[str(tool) for tool in cast(list[Any], state["toolsUsed"])],
                name=_optional(state.get("name")),
                update=state.get("update") is True,
                routing=_optional(state.get("routing")),
                capability=_optional(state.get("capability")),
                version_tag=_optional(state.get("versionTag")),
            )
        except (KeyError, IndexError, TypeError):
            return None


def _optional(value: object) -> str | None:
    return value if isinstance(value, str) else None


def require_one_side(plan: Plan) -> None:
    """Code handed to a client may use the client's servers only: the client cannot call
    the gateway's servers or capabilities from its sandbox (``INVALID_INPUT``)."""
    others = [target.address for target in plan.targets.values() if not target.on_client]
    if others:
        mine = ", ".join(plan.client_tools)
        raise InvalidInput(
            f"This code uses tools of your machine ({mine}) and of the PML server "
            f"({', '.join(others)}): run them in separate snippets",
            field="code",
        )


def new_workflow_id() -> str:
    return f"wf_{uuid.uuid4().hex}"


class ClientHandoff:
    """Stores learning contexts and builds the ``execute_locally`` answers."""

    def __init__(
        self,
        workflows: WorkflowStateStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        routing: RoutingRules | None = None,
        policy: PolicyEnforcer | None = None,
    ) -> None:
        self.workflows = workflows
        self.ttl_s = ttl_s
        self.routing = routing or RoutingRules()
        self._policy = policy

    async def direct(
        self,
        scope: Scope,
        params: ExecuteParams,
        analysis: SnippetAnalysis,
        plan: Plan,
        request: RequestPolicy | None,
    ) -> dict[str, Any]:
        """Hand a ``pml_execute`` snippet to the client; its success becomes a capability."""
        context = LearningContext.of_request(params, analysis, plan)
        answer = await self._offer(scope, context, params.args or {}, plan, request)
        if params.options is not None and params.options.timeout_ms is not None:
            answer["timeoutMs"] = params.options.timeout_ms
        return answer

    async def capability(
        self,
        scope: Scope,
        resolved: Resolved,
        given: dict[str, Any],
        plan: Plan,
        request: RequestPolicy | None,
    ) -> dict[str, Any] | None:
        """Hand a stored capability to the client when its code uses the client's servers
        (None: it runs on the gateway); the client's run counts as a use of it."""
        record, version = resolved.record, resolved.version
        if record.record_type != "capability" or not version.code or not plan.client_tools:
            return None
        args = merged_args(version.parameters_schema, given)
        check_args(version.parameters_schema, args, capability=record.display_name)
        context = LearningContext(
            mode="capability",
            code=version.code,
            intent=record.intent or record.display_name,
            code_hash=version.code_hash or "",
            targets=dict(plan.targets),
            tools_used=[target.address for target in plan.targets.values()],
            capability=record.fqdn,
        )
        answer = await self._offer(scope, context, args, plan, request)
        answer.update(capabilityFqdn=record.fqdn, capabilityName=record.display_name)
        return answer

    async def _offer(
        self,
        scope: Scope,
        context: LearningContext,
        args: dict[str, Any],
        plan: Plan,
        request: RequestPolicy | None,
    ) -> dict[str, Any]:
        require_one_side(plan)
        workflow_id = new_workflow_id()
        expires_at = await self.workflows.put(
            workflow_id,
            kind=CLIENT_RUN_KIND,
            scope=scope,
            state=context.to_state(),
            ttl_s=self.ttl_s,
        )
        client_tools = plan.client_tools
        if self._policy is not None and request is not None:
            details = {
                "status": "execute_locally",
                "workflow_id": workflow_id,
                "client_tools": client_tools,
            }
            self._policy.emit(request, "EXECUTOR_RESPONSE", details)
        return {
            "status": "execute_locally",
            "workflowId": workflow_id,
            "code": context.code,
            "args": args,
            "intent": context.intent,
            "toolsUsed": context.tools_used,
            "clientTools": client_tools,
            "routing": "local",
            "expiresAt": expires_at.isoformat(),
        }


class OfflineContexts:
    """Learning contexts for code a PML client ran while the gateway was unreachable.

    The trace carries the code, intent, requested name and routing; the gateway checks them
    exactly as it checks a ``pml_execute`` before handing code over (size, syntax, every
    reference resolved with the client's servers, the policy's static check) and refuses
    code that uses none of the client's servers (such code runs on the gateway)."""

    def __init__(
        self,
        *,
        registry: CapabilityRegistry,
        pool: UpstreamPool,
        routing: RoutingRules,
        policy: PolicyEnforcer | None,
        max_code_bytes: int,
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._policy = policy
        # [routing] and [sandbox] max_code_bytes: a reload replaces them.
        self.routing = routing
        self.max_code_bytes = max_code_bytes

    async def build(
        self, scope: Scope, client: ClientCaller | None, offline: Mapping[str, Any]
    ) -> LearningContext:
        """The context of an offline run (a ``PmlError`` says why it cannot be learned)."""
        try:
            params = ExecuteParams.model_validate({**offline, "update": False})
        except ValidationError as error:
            problem = error.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise InvalidInput(f"Invalid offline run: {where}: {problem['msg']}") from None
        if params.code is None:
            raise InvalidInput("Invalid offline run: no code", field="code")
        analysis = await analysis_of(params.code, self.max_code_bytes, scope.tenant)
        plan = await plan_references(
            analysis.calls,
            scope=scope,
            registry=self._registry,
            pool=self._pool,
            client=client,
            routing=self.routing,
        )
        if not plan.client_tools:
            raise InvalidInput("This code uses none of the client's servers: it runs here")
        require_one_side(plan)
        if self._policy is not None:
            request = await self._policy.begin(scope, params.intent, source="trace")
            tools = await upstream_tools(scope, self._registry, plan, [])
            self._policy.check_static(request, tools)
        return LearningContext.of_request(params, analysis, plan)
