"""``pml approvals list|show|approve|deny``: a person decides what runs wait for (SPEC §10.5).

On the local database (the configured ``[scope]`` org/project), or on a shared PML with
``--server URL --api-key KEY`` (an ``admin`` key; ``$PML_API_KEY`` works too)::

    $ pml approvals list
    $ pml approvals show wf_3f2a...                   # every argument, targets first
    $ pml approvals approve wf_3f2a... --grant session
    Approve filesystem:write_file for erwan, grant session? [y/N] y
    $ pml approvals deny wf_3f2a...

Approving on the local database is a person's act: it asks on an interactive terminal and
refuses without one, since an agent's shell is not a terminal (``decided_by`` is
``user:<OS login>``). Against ``--server`` the admin key is the person's proof; the question
is still asked when stdin is a terminal. Denying never needs a terminal. ``--json`` prints
``{"items": [view, ...]}`` for ``list`` and the approval's view for the other verbs. Every
text that comes from an approval is printed with control and bidi characters escaped.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from pml.cli.approvals_remote import check_grant, check_id, safe_line
from pml.cli.common import (
    ConfigOption,
    JsonOption,
    fail,
    load_cli_settings,
    print_json,
    run_command,
)
from pml.cli.status_cmd import safe_text
from pml.errors import AlreadyDecided, Forbidden, InvalidInput, PmlError

if TYPE_CHECKING:
    from pml.cli.approvals_remote import RemoteDesk
    from pml.execution.approval_desk import ApprovalDesk
    from pml.registry.scope import Scope

T = TypeVar("T")
View = dict[str, Any]
LocalAction = Callable[["ApprovalDesk", "Scope"], Awaitable[T]]
RemoteAction = Callable[["RemoteDesk"], Awaitable[T]]
Check = Callable[[], object]

TARGET_CHARS = 60
NO_TERMINAL = (
    "approve needs a person at an interactive terminal (stdin is not one): run it in your "
    "own shell, or use --server URL --api-key <admin key>, or the dashboard"
)

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        help="A shared PML (http(s)://host:port) instead of the local database.",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key", envvar="PML_API_KEY", help="An admin API key for --server ($PML_API_KEY)."
    ),
]
IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The approval's workflow id.")]


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        raise InvalidInput(
            "Cannot tell who you are (no OS login name): set $USER, or use --server"
        ) from None


async def _safely(body: Callable[[], Awaitable[T]]) -> T:
    """``body()``, its errors' messages made printable (they may quote server text)."""
    try:
        return await body()
    except PmlError as error:
        raise type(error)(safe_line(error.message), **error.data) from None


@dataclass(frozen=True, slots=True)
class Where:
    """Where a verb acts: ``--server`` with its key, else the configured database."""

    ctx: typer.Context
    config: Any
    as_json: bool
    server: str | None
    api_key: str | None

    def run(self, local: LocalAction[T], remote: RemoteAction[T], checks: Check) -> T:
        """``checks()``, then ``remote`` on ``--server`` or ``local``; errors: one line."""

        async def body() -> T:
            checks()
            if self.server is not None:
                from pml.cli.approvals_remote import RemoteDesk

                if not self.api_key:
                    raise InvalidInput("--server needs --api-key KEY (or $PML_API_KEY)")
                return await remote(RemoteDesk.of(self.server, self.api_key))
            source = self.ctx.get_parameter_source("api_key")
            if source is not None and source.name == "COMMANDLINE":  # not $PML_API_KEY
                raise InvalidInput("--api-key needs --server URL", field="api_key")
            return await _on_local(self.ctx, self.config, local)

        return run_command(lambda: _safely(body), as_json=self.as_json)

    def fetch(self, workflow_id: str, checks: Check) -> View:
        async def local(desk: ApprovalDesk, scope: Scope) -> View:
            return await desk.show(workflow_id, org=scope.org, project=scope.project)

        async def remote(desk: RemoteDesk) -> View:
            return await desk.show(workflow_id)

        return self.run(local, remote, checks)

    def decide(self, workflow_id: str, decision: str, checks: Check) -> View:
        async def local(desk: ApprovalDesk, scope: Scope) -> View:
            me = _login()
            org, project = scope.org, scope.project
            return await desk.decide(
                workflow_id, decision, org=org, project=project, decided_by=f"user:{me}", actor=me
            )

        async def remote(desk: RemoteDesk) -> View:
            return await desk.decide(workflow_id, decision)

        return self.run(local, remote, checks)


async def _on_local(ctx: typer.Context, config: Any, action: LocalAction[T]) -> T:
    """``action`` with the desk of the configured database (migrated on open)."""
    from pml.config import audit_file_path
    from pml.execution.approval_desk import ApprovalDesk
    from pml.policy.audit import AuditLog
    from pml.policy.grant_stamp import grant_stamp_for
    from pml.policy.grants import GrantService
    from pml.policy.version import policy_version
    from pml.storage.database import Database
    from pml.storage.workflow_repo import WorkflowStateStore
    from pml.wiring import scope_of

    settings = load_cli_settings(ctx, config)
    scope = scope_of(settings)
    db = await Database.open(settings.database_url)
    try:
        audit = AuditLog(db, audit_file_path(settings))  # decisions are audited like the gateway's
        async with audit.running():
            grants = GrantService(
                db,
                audit,
                policy_version=policy_version(settings),
                stamp=grant_stamp_for(settings),  # running gateways see the grant at once
            )
            desk = ApprovalDesk(WorkflowStateStore(db), grants, audit, settings.permissions)
            return await action(desk, scope)
    finally:
        await db.close()


def _text(value: object) -> str:
    return "-" if value is None or value == "" else safe_line(value)


def _when(value: object) -> str:
    text = _text(value)
    return text[:19].replace("T", " ") + (" UTC" if text.endswith("+00:00") else "")


def _arguments(view: View) -> list[dict[str, Any]]:
    items = view.get("arguments")
    if not isinstance(items, list):
        return []
    return [
        cast(dict[str, Any], item) for item in cast(list[object], items) if isinstance(item, dict)
    ]


def _target(view: View) -> str:
    for item in _arguments(view):
        if item.get("target"):
            shown = safe_line(f"{item.get('name')}={item.get('value')}", TARGET_CHARS)
            return shown
    return "-"


def review_lines(view: View) -> list[str]:
    """What a person reads before deciding (the same text as the elicitation form)."""
    from pml.policy.approval_review import review_lines as review

    return review(view, when=_when)


def _print_list(items: list[View]) -> None:
    if not items:
        typer.echo("no approvals waiting")
        return
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table

    table = Table("id", "tool", "capability", "target", "user", "expires")
    for view in items:
        row = (
            _text(view.get("workflowId")),
            _text(view.get("tool")),
            _text(view.get("capability")),
            _target(view),
            _text(view.get("user")),
            _when(view.get("expiresAt")),
        )
        table.add_row(*(safe_text(value) for value in row))
    Console().print(table)


def _already(view: View) -> PmlError:
    by = f" by {_text(view.get('decidedBy'))}" if view.get("decidedBy") else ""
    return AlreadyDecided(
        f"Approval {_text(view.get('workflowId'))} was already {_text(view.get('status'))}{by}"
    )


def _confirmed(view: View, grant: str, *, err: bool) -> bool:
    """Show the approval, ask, and read the answer from the terminal; only y/yes approves."""
    typer.echo("\n".join(review_lines(view)), err=err)
    question = (
        f"Approve {_text(view.get('tool'))} for {_text(view.get('user'))}, grant {grant}? [y/N] "
    )
    stream = sys.stderr if err else sys.stdout
    stream.write(question)
    stream.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):  # end of input: no answer means no
        stream.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _decided_line(view: View) -> str:
    status = _text(view.get("status"))
    grant = f", grant {_text(view.get('grant'))}" if view.get("grant") else ""
    then = "resumes" if status == "approved" else "ends"
    return (
        f"{status} {_text(view.get('workflowId'))}: {_text(view.get('tool'))} for "
        f"{_text(view.get('user'))}{grant} (by {_text(view.get('decidedBy'))}); the run {then} "
        "when its agent calls continue_workflow"
    )


def _print_decided(view: View, *, as_json: bool) -> None:
    if as_json:
        print_json(view)
    else:
        typer.echo(_decided_line(view))


def register(app: typer.Typer) -> None:
    """Add the ``approvals`` group to the ``pml`` application."""
    group = typer.Typer(
        help="Approvals that runs wait for: a person lists, reviews and decides them.",
        no_args_is_help=True,
    )

    @group.command("list")
    def list_(
        ctx: typer.Context,
        server: ServerOption = None,
        api_key: ApiKeyOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List the approvals waiting in the org/project (oldest first)."""

        async def local(desk: ApprovalDesk, scope: Scope) -> list[View]:
            return await desk.pending(scope.org, scope.project)

        async def remote(desk: RemoteDesk) -> list[View]:
            return await desk.pending()

        items = Where(ctx, config, as_json, server, api_key).run(local, remote, lambda: None)
        if as_json:
            print_json({"items": items})
            return
        _print_list(items)

    @group.command("show")
    def show(
        ctx: typer.Context,
        workflow_id: IdArgument,
        server: ServerOption = None,
        api_key: ApiKeyOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Show one approval: the call, who asks, every argument, what each grant allows."""
        where = Where(ctx, config, as_json, server, api_key)
        view = where.fetch(workflow_id, lambda: check_id(workflow_id))
        if as_json:
            print_json(view)
            return
        typer.echo("\n".join(review_lines(view)))

    @group.command("approve")
    def approve(
        ctx: typer.Context,
        workflow_id: IdArgument,
        grant: Annotated[
            str,
            typer.Option(
                "--grant",
                help="once (this call), session (this tool for a while), always (until revoked).",
            ),
        ] = "once",
        server: ServerOption = None,
        api_key: ApiKeyOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Approve after reviewing it on your terminal: the waiting run gets a grant."""
        where = Where(ctx, config, as_json, server, api_key)
        terminal = sys.stdin.isatty()

        def checks() -> None:
            check_id(workflow_id)
            check_grant(grant)
            if server is None and not terminal:
                raise Forbidden(NO_TERMINAL)

        if server is None or terminal:  # the admin key of --server is the person's proof
            view = where.fetch(workflow_id, checks)
            if view.get("status") not in (None, "pending"):
                raise fail(_already(view), as_json=as_json)
            if not _confirmed(view, grant, err=as_json):
                print("not approved: nothing decided", file=sys.stderr)
                raise typer.Exit(code=1)
        _print_decided(where.decide(workflow_id, grant, checks), as_json=as_json)

    @group.command("deny")
    def deny(
        ctx: typer.Context,
        workflow_id: IdArgument,
        server: ServerOption = None,
        api_key: ApiKeyOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Deny: the waiting run stops (refusing never needs a terminal)."""
        where = Where(ctx, config, as_json, server, api_key)
        view = where.decide(workflow_id, "deny", lambda: check_id(workflow_id))
        _print_decided(view, as_json=as_json)

    app.add_typer(group, name="approvals")
