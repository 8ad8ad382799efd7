"""``pml execute INTENT --code FILE|- | --capability NAME``: ``pml_execute`` from a shell.

    pml execute "list the demo files" --code snippet.py --arg root=examples/demo
    echo 'return 1 + 1' | pml execute "add" --code - --json
    pml execute "read it again" --capability fs:read_json --arg path=b.json
    pml execute "save notes" --continue-workflow wf_... --approve   # once a person approved

It opens the configured gateway (database, upstream servers, sandbox) and calls the same
tool an agent calls, so the answer, the capture and the errors are those of SPEC §5.
``--arg k=v`` takes ``v`` as JSON when it is JSON (``n=3``, ``flags=[1,2]``), else as text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from pml.cli.common import (
    ConfigOption,
    DebugRoutingOption,
    JsonOption,
    call_gateway_tool,
    load_cli_settings,
    print_json,
    run_command,
    with_debug_routing,
)
from pml.errors import InvalidInput

MAX_CODE_FILE_BYTES = 10_000_000  # the sandbox's own limit applies after; this bounds the read


def parse_arg(text: str) -> tuple[str, Any]:
    """``k=v`` → ``("k", v)``, ``v`` parsed as JSON when it is JSON."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise InvalidInput(f"--arg must be key=value, got {text!r}", field="arg")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def read_code(source: str) -> str:
    """The snippet from a file, or from stdin for ``-``."""
    if source == "-":
        data = sys.stdin.buffer.read(MAX_CODE_FILE_BYTES + 1)
    else:
        path = Path(source)
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_CODE_FILE_BYTES + 1)
        except OSError as error:
            raise InvalidInput(f"Cannot read {source}: {error.strerror}", field="code") from None
    if len(data) > MAX_CODE_FILE_BYTES:
        raise InvalidInput(f"{source} is larger than {MAX_CODE_FILE_BYTES} bytes", field="code")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{source} is not UTF-8 text", field="code") from None


def execute_arguments(
    intent: str,
    code: str | None,
    capability: str | None,
    args: list[str],
    name: str | None,
    update: bool,
    routing: str | None,
    timeout_ms: int | None,
) -> dict[str, Any]:
    """The ``pml_execute`` arguments the options describe."""
    arguments: dict[str, Any] = {"intent": intent}
    if code is not None:
        arguments["code"] = read_code(code)
    if capability is not None:
        arguments["capability"] = capability
    if args:
        arguments["args"] = dict(parse_arg(item) for item in args)
    if name is not None:
        arguments["name"] = name
    if update:
        arguments["update"] = True
    if routing is not None:
        arguments["routing"] = routing
    if timeout_ms is not None:
        arguments["options"] = {"timeout_ms": timeout_ms}
    return arguments


def _summary(answer: dict[str, Any]) -> None:
    if answer.get("status") == "approval_required":
        for item in answer.get("approvals", []):
            typer.echo(f"approval required: {item.get('tool')} ({item.get('capability')})")
            typer.echo(f"  arguments: {item.get('args_summary')}")
        workflow = answer.get("workflowId")
        state = "still waiting for" if answer.get("pending") else "needs"
        typer.echo(f"this run {state} a person's approval: pml approvals approve {workflow}")
        typer.echo(f"then resume: pml execute ... --continue-workflow {workflow} --approve")
        return
    if answer.get("status") == "suggestions":
        for item in answer.get("suggestions", []):
            typer.echo(f"{item['score']:.2f}  {item['callName']}  {item.get('description', '')}")
        return
    created = "created" if answer.get("created") else "reused"
    typer.echo(f"{answer['capabilityName']}  {answer['capabilityFqdn']}  ({created})")
    for line in answer.get("logs", []):
        typer.echo(f"log: {line}")
    typer.echo(json.dumps(answer.get("result"), ensure_ascii=False, indent=2))


def register(app: typer.Typer) -> None:
    """Add ``pml execute`` to the ``pml`` application."""

    @app.command("execute")
    def execute(  # pyright: ignore[reportUnusedFunction]
        ctx: typer.Context,
        intent: Annotated[str, typer.Argument(help="What the run is for, in plain words.")],
        code: Annotated[
            str | None, typer.Option("--code", help="Snippet file, or - for stdin.")
        ] = None,
        capability: Annotated[
            str | None, typer.Option("--capability", help="Run a capability by name.")
        ] = None,
        arg: Annotated[
            list[str] | None, typer.Option("--arg", help="k=v argument (repeat; v may be JSON).")
        ] = None,
        name: Annotated[str | None, typer.Option("--name", help="Name the new capability.")] = None,
        update: Annotated[
            bool, typer.Option("--update", help="Make the code a new version of --name.")
        ] = False,
        routing: Annotated[
            str | None, typer.Option("--routing", help="local or cloud (override).")
        ] = None,
        timeout_ms: Annotated[
            int | None, typer.Option("--timeout-ms", help="Wall-time limit of this run.")
        ] = None,
        continue_workflow: Annotated[
            str | None,
            typer.Option(
                "--continue-workflow",
                metavar="WORKFLOW_ID",
                help="Resume a run waiting for approval (with --approve or --deny).",
            ),
        ] = None,
        approve: Annotated[
            bool | None,
            typer.Option("--approve/--deny", help="Approve or refuse --continue-workflow."),
        ] = None,
        grant: Annotated[
            str, typer.Option("--grant", help="once, session or always (with --approve).")
        ] = "once",
        config: ConfigOption = None,
        as_json: JsonOption = False,
        debug_routing: DebugRoutingOption = False,
    ) -> None:
        """Run a snippet (it becomes a capability) or a capability by name."""

        async def body() -> dict[str, Any]:
            arguments = execute_arguments(
                intent, code, capability, arg or [], name, update, routing, timeout_ms
            )
            if continue_workflow is not None or approve is not None:
                if continue_workflow is None or approve is None:
                    raise InvalidInput(
                        "--continue-workflow needs --approve or --deny (and the other way round)",
                        field="continue_workflow",
                    )
                arguments["continue_workflow"] = {
                    "workflow_id": continue_workflow,
                    "approved": approve,
                    "grant": grant,
                }
            settings = with_debug_routing(load_cli_settings(ctx, config), debug_routing)
            return await call_gateway_tool(settings, "pml_execute", arguments)

        answer = run_command(body, as_json=as_json)
        if as_json:
            print_json(answer)
        else:
            _summary(answer)
