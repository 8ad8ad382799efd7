"""The plain sections of ``pml.toml`` (``[routing]``, ``[sandbox]``, ``[llm]``, ...).

:mod:`pml.config` assembles them into :class:`pml.config.Settings` and re-exports them.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RoutingSettings(BaseModel):
    """Server-name patterns that run in the cloud or locally (SPEC §8)."""

    model_config = ConfigDict(extra="forbid")

    cloud: list[str] = Field(default_factory=list[str])
    local: list[str] = Field(default_factory=list[str])
    # How long code handed to a PML client (execute_locally) waits for the client's trace.
    workflow_ttl_s: float = Field(default=3600.0, gt=0, le=7 * 86400)
    # How long a trace ingest request may hold a workflow before another request takes it
    # over (the holder is presumed dead); raise it when capturing a batch is slow.
    trace_claim_lease_s: float = Field(default=30.0, ge=1, le=3600)


class SandboxSettings(BaseModel):
    """Limits of one snippet run (SPEC §4)."""

    model_config = ConfigDict(extra="forbid")

    wall_time_s: float = Field(default=30.0, gt=0)
    memory_mb: int = Field(default=256, gt=0)
    max_tool_calls: int = Field(default=200, gt=0)
    max_code_bytes: int = Field(default=100_000, gt=0)
    max_result_bytes: int = Field(default=1_000_000, gt=0)
    # One upstream tool result a snippet receives; larger ones fail the run (LIMIT_EXCEEDED).
    max_tool_result_bytes: int = Field(default=10_000_000, gt=0)
    # The arguments of one tool call a snippet makes, and of all its calls in flight at once.
    max_tool_args_bytes: int = Field(default=10_000_000, gt=0)
    # Sandbox worker processes of this gateway (a pool setting, read at start);
    # 0: automatic, twice the CPU count and at least 4 (see ``pool_size``).
    workers: int = Field(default=0, ge=0, le=256)

    def pool_size(self) -> int:
        """The number of sandbox worker processes: ``workers``, or twice the CPUs (>= 4)."""
        if self.workers > 0:
            return self.workers
        return max(4, 2 * (os.cpu_count() or 1))


class LlmSettings(BaseModel):
    """An optional OpenAI-compatible endpoint for curation names and intent routing."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(pattern=r"^https?://")
    model: str = Field(min_length=1)
    # The name of the environment variable holding the key (never the key itself).
    api_key_env: str | None = None
    timeout_s: float = Field(default=20.0, gt=0, le=600)


PermissionCapabilityName = Literal[
    "file_read",
    "file_write",
    "system_execute",
    "network",
    "web_search",
    "browser",
    "memory_read",
    "memory_write",
    "screen_read",
    "time",
    "compute",
    "meta",
    "unknown",
]


class IntentPolicySettings(BaseModel):
    """One row of the policy table: what an intent may and may not use (SPEC §10.3).

    ``allowed`` / ``forbidden`` are permission capabilities (``"*"`` in ``forbidden``: all);
    ``exceptions`` are ``server:tool`` patterns permitted whatever their capability.
    """

    model_config = ConfigDict(extra="forbid")

    allowed: list[PermissionCapabilityName] = Field(default_factory=list[PermissionCapabilityName])
    forbidden: list[PermissionCapabilityName | Literal["*"]] = Field(
        default_factory=list[PermissionCapabilityName | Literal["*"]]
    )
    exceptions: list[str] = Field(default_factory=list[str])


class PolicySettings(BaseModel):
    """The intent router and the policy gate (SPEC §10).

    ``mode = "audit"`` logs what the gate would refuse and lets it run; permission rules
    and grants are enforced in both modes.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["enforce", "audit"] = "enforce"
    # An LLM classification is used only at or above this confidence (else heuristics).
    llm_min_confidence: float = Field(default=0.65, ge=0, le=1)
    # ``server:tool`` glob -> permission capability, checked before the built-in defaults.
    capabilities: dict[str, PermissionCapabilityName] = Field(
        default_factory=dict[str, PermissionCapabilityName]
    )
    # intent -> its row of the policy table, replacing the built-in row.
    intents: dict[str, IntentPolicySettings] = Field(
        default_factory=dict[str, IntentPolicySettings]
    )
    # Print each request's router output, policy decision and permission checks to stderr.
    debug_routing: bool = False


class PermissionsSettings(BaseModel):
    """``server:tool`` patterns per decision; deny beats ask beats allow (SPEC §10.4).

    A tool no pattern names gets the default of its capability: ask for ``file_write``,
    ``system_execute``, ``memory_write`` and ``unknown``, allow otherwise.
    """

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(default_factory=list[str])
    ask: list[str] = Field(default_factory=list[str])
    deny: list[str] = Field(default_factory=list[str])
    # How long a run waiting for approval can be resumed.
    approval_ttl_s: float = Field(default=900.0, gt=0)
    # How long a tool call waits for the person's answer to an elicitation form before
    # the run pauses for an approval out of band (`pml approvals approve`).
    approval_wait_s: float = Field(default=300.0, gt=0, le=86_400)
    # The dashboard's public base URL (``https://pml.example.com``). When set, a client that
    # declared URL-mode elicitation is sent the approval's page there instead of a form, and
    # the call waits (approval_wait_s) for the person's decision on the dashboard. From
    # configuration only: a URL taken from the request would be the agent's to choose.
    approval_url: str | None = Field(
        default=None, max_length=500, pattern=r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"
    )
    # Let the agent's own continue_workflow {approved: true} approve (off: only a person
    # can; `pml serve` warns at start when it is on).
    agent_may_approve: bool = False
    # Lifetimes of grants issued by an approval: "once" (until used) and "session".
    once_grant_ttl_s: float = Field(default=900.0, gt=0)
    session_grant_ttl_s: float = Field(default=28_800.0, gt=0)


class AuditSettings(BaseModel):
    """Where audit events go (SPEC §10.6): a JSON-lines file and the database."""

    model_config = ConfigDict(extra="forbid")

    # Default: ``audit.jsonl`` in the user data directory; "" writes no file.
    file: str | None = None
    # Identical denials within this window are written once, with a repeat count.
    coalesce_window_s: float = Field(default=60.0, ge=0)


class UpstreamSettings(BaseModel):
    """Timeouts of the upstream pool: per call, per start, and before an idle lazy server
    stops; ``list_wait_s``: how long a ``tools/list`` waits for servers still starting (the
    gateway answers ``initialize`` at once; later servers arrive with ``list_changed``)."""

    model_config = ConfigDict(extra="forbid")

    call_timeout_s: float = Field(default=60.0, gt=0)
    start_timeout_s: float = Field(default=30.0, gt=0)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    list_wait_s: float = Field(default=2.0, ge=0, le=300)


class GatewaySettings(BaseModel):
    """What the gateway's ``tools/list`` shows (SPEC §6.6).

    ``capability_tools_budget``: the tokens (cl100k, estimated) the named capabilities'
    tools may take in one caller's ``tools/list``, most used and most recent first; the
    rest stay callable by name and found by ``pml_discover``. 0 lists none. Read at start.
    """

    model_config = ConfigDict(extra="forbid")

    capability_tools_budget: int = Field(default=4_500, ge=0, le=1_000_000)

    @field_validator("capability_tools_budget", mode="before")
    @classmethod
    def _a_whole_number(cls, value: object) -> object:
        if isinstance(value, (bool, float)):
            raise ValueError("must be a whole number of tokens")  # not true, nor 4500.0
        return value


class DiscoverySettings(BaseModel):
    """How ``pml_discover`` embeds text (SPEC §7).

    ``embedder = "auto"`` uses the installed MiniLM model and falls back to the
    deterministic hashing embedder (with a warning) when the model is not installed;
    ``"minilm"`` insists on the model; ``"hashing"`` never loads it.

    ``model_process``: where the model runs. ``"own"``: in this process. ``"shared"``: in
    one embedding process per user and installation that every local gateway uses (started
    on demand, it stops once unused; a gateway that cannot use it loads its own copy).
    ``"auto"``: shared for ``pml serve --stdio`` (one per agent window), own otherwise.
    """

    model_config = ConfigDict(extra="forbid")

    embedder: Literal["auto", "minilm", "hashing"] = "auto"
    model_process: Literal["auto", "own", "shared"] = "auto"


class CurationSettings(BaseModel):
    """Naming of unnamed capabilities (``cap_curate``, SPEC §6.5)."""

    model_config = ConfigDict(extra="forbid")

    # A suggest run starts by itself after this many new unnamed capabilities (0 = never).
    auto_suggest_after: int = Field(default=10, ge=0)
    # ... and at most one automatic run per project this often, in seconds (0 = no minimum).
    auto_suggest_interval_s: float = Field(default=60.0, ge=0, le=86_400)
    batch_size: int = Field(default=5, ge=1, le=50)
    # auto mode applies suggestions whose confidence is strictly above this
    auto_threshold: float = Field(default=0.8, ge=0, le=1)
