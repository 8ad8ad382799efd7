"""What every CLI command shares: the ``--config`` option, JSON output, one-line errors.

A command body is a coroutine run by :func:`run_command`; a ``PmlError`` it raises becomes
one line on stderr (or a JSON error object on stdout with ``--json``) and exit code 1,
never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from pml.errors import PmlError, error_from_dict

if TYPE_CHECKING:
    from pml.config import Settings

T = TypeVar("T")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Path to pml.toml (default: $PML_CONFIG, then ./pml.toml).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def config_path(ctx: typer.Context, local: Path | None) -> Path | None:
    """The config path given to this command, else the one given to ``pml`` itself."""
    if local is not None:
        return local
    root = ctx.find_root()
    obj: object = root.obj
    if isinstance(obj, dict) and "config" in obj:
        found: object = obj["config"]  # pyright: ignore[reportUnknownVariableType]
        if isinstance(found, Path):
            return found
    return None


def load_cli_settings(ctx: typer.Context, local: Path | None) -> Any:
    """Settings for a CLI command: config file, then ``PML_`` environment overrides."""
    from pml.config import load_settings

    return load_settings(config_path(ctx, local), environ=os.environ)


def print_json(value: object) -> None:
    """One JSON document on stdout (ensure_ascii off: names and intents may be unicode)."""
    typer.echo(json.dumps(value, ensure_ascii=False, default=str))


def fail(error: PmlError, *, as_json: bool) -> typer.Exit:
    """Report a user error in one line and return the exit to raise."""
    if as_json:
        print_json({"error": error.to_dict()})
    else:
        message = " ".join(error.message.split())
        print(f"error: {error.code}: {message}", file=sys.stderr)
    return typer.Exit(code=1)


def run_command(body: Callable[[], Awaitable[T]], *, as_json: bool = False) -> T:
    """Run an async command body; ``PmlError`` becomes a one-line error and exit 1."""
    import asyncio  # here: ``pml --help`` and ``pml reload`` never need an event loop

    try:
        return asyncio.run(_call(body))
    except PmlError as error:
        raise fail(error, as_json=as_json) from None


async def _call(body: Callable[[], Awaitable[T]]) -> T:
    return await body()


# The gateway tools whose answer depends on the upstream servers being up.
UPSTREAM_TOOLS = frozenset({"pml_discover", "pml_execute"})


async def call_gateway_tool(
    settings: Settings, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Open the configured gateway, call one of its tools as the default scope, and return
    its JSON; an ``isError`` answer is raised as its ``PmlError``."""
    from pml.gateway.server import open_gateway

    async with open_gateway(settings, llm_api_key=llm_key(settings)) as gateway:
        if name in UPSTREAM_TOOLS:  # a one-shot command sees every server that starts
            await gateway.pool.settled(settings.upstream.start_timeout_s)
        result = await gateway.tools.call_tool(gateway.default_scope, name, arguments)
    answer: dict[str, Any] = result.structured_content or {}
    if result.is_error:
        error: object = answer.get("error")
        raise error_from_dict(cast("dict[str, Any]", error) if isinstance(error, dict) else {})
    return answer


DebugRoutingOption = Annotated[
    bool,
    typer.Option(
        "--debug-routing",
        help="Print each request's router output, policy decision and permission checks to stderr.",
    ),
]


def with_debug_routing(settings: Settings, debug_routing: bool) -> Settings:
    """``settings`` with ``[policy] debug_routing`` switched on when asked."""
    if not debug_routing:
        return settings
    policy = settings.policy.model_copy(update={"debug_routing": True})
    return settings.model_copy(update={"policy": policy})


def with_model_process(settings: Settings, *, stdio: bool) -> Settings:
    """``settings`` with ``[discovery] model_process = "auto"`` decided for this serve: the
    shared embedding process for stdio (a gateway per agent window), this process for HTTP."""
    if settings.discovery.model_process != "auto":
        return settings
    chosen = "shared" if stdio else "own"
    discovery = settings.discovery.model_copy(update={"model_process": chosen})
    return settings.model_copy(update={"discovery": discovery})


def llm_key(settings: Settings) -> str | None:
    """The ``[llm]`` endpoint's API key, from the variable ``llm.api_key_env`` names."""
    from pml.llm import llm_api_key

    return llm_api_key(settings.llm, os.environ)
