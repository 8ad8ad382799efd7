"""The plain sections of ``pml.toml`` (``[routing]``, ``[sandbox]``, ``[llm]``, ...).

:mod:`pml.config` assembles them into :class:`pml.config.Settings` and re-exports them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RoutingSettings(BaseModel):
    """Server-name patterns that run in the cloud or locally (SPEC §8)."""

    model_config = ConfigDict(extra="forbid")

    cloud: list[str] = Field(default_factory=list[str])
    local: list[str] = Field(default_factory=list[str])


class SandboxSettings(BaseModel):
    """Limits of one snippet run (SPEC §4)."""

    model_config = ConfigDict(extra="forbid")

    wall_time_s: float = Field(default=30.0, gt=0)
    memory_mb: int = Field(default=256, gt=0)
    max_tool_calls: int = Field(default=200, gt=0)
    max_code_bytes: int = Field(default=100_000, gt=0)
    max_result_bytes: int = Field(default=1_000_000, gt=0)


class LlmSettings(BaseModel):
    """An optional OpenAI-compatible endpoint for curation names and intent routing."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(pattern=r"^https?://")
    model: str = Field(min_length=1)
    # The name of the environment variable holding the key (never the key itself).
    api_key_env: str | None = None
    timeout_s: float = Field(default=20.0, gt=0, le=600)


class PolicySettings(BaseModel):
    """The policy gate (SPEC §10)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["enforce", "audit"] = "enforce"


class PermissionsSettings(BaseModel):
    """``server:tool`` patterns per decision; deny beats ask beats allow (SPEC §10)."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(default_factory=list[str])
    ask: list[str] = Field(default_factory=list[str])
    deny: list[str] = Field(default_factory=list[str])


class UpstreamSettings(BaseModel):
    """Timeouts of the upstream pool: per call, per start, and before an idle lazy server stops."""

    model_config = ConfigDict(extra="forbid")

    call_timeout_s: float = Field(default=60.0, gt=0)
    start_timeout_s: float = Field(default=30.0, gt=0)
    idle_timeout_s: float = Field(default=300.0, gt=0)


class DiscoverySettings(BaseModel):
    """How ``pml_discover`` embeds text (SPEC §7).

    ``embedder = "auto"`` uses the installed MiniLM model and falls back to the
    deterministic hashing embedder (with a warning) when the model is not installed;
    ``"minilm"`` insists on the model; ``"hashing"`` never loads it.
    """

    model_config = ConfigDict(extra="forbid")

    embedder: Literal["auto", "minilm", "hashing"] = "auto"


class CurationSettings(BaseModel):
    """Naming of unnamed capabilities (``cap_curate``, SPEC §6.5)."""

    model_config = ConfigDict(extra="forbid")

    # A suggest run starts by itself after this many new unnamed capabilities (0 = never).
    auto_suggest_after: int = Field(default=10, ge=0)
    batch_size: int = Field(default=5, ge=1, le=50)
    # auto mode applies suggestions whose confidence is strictly above this
    auto_threshold: float = Field(default=0.8, ge=0, le=1)
