"""``pml perms list|grant|revoke|revoke-all``: permission grants (SPEC §1, §10.4).

Grants act in the configured ``[scope]`` org/project unless ``--org`` / ``--project`` say
otherwise; ``grant`` issues for the local user (``[scope] user`` or the OS user) unless
``--user`` names another principal. A grant lasts ``[permissions] session_grant_ttl_s``
unless ``--ttl SECONDS`` or ``--forever`` is given, and is bound to the current policy
version. ``--json`` prints ``{"items": [...]}`` for ``list``, the grant for ``grant`` and
``revoke``, and ``{"revoked", "org", "project", "user"}`` for ``revoke-all``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.cli.status_cmd import safe_text
from pml.errors import InvalidInput
from pml.registry.scope import Scope

if TYPE_CHECKING:
    from pml.config import Settings
    from pml.policy.grants import GrantService
    from pml.policy.permissions import Grant

T = TypeVar("T")
logger = logging.getLogger(__name__)

OrgOption = Annotated[
    str | None, typer.Option("--org", help="Org of the grants (default: [scope] org).")
]
ProjectOption = Annotated[
    str | None, typer.Option("--project", help="Project of the grants (default: [scope] project).")
]


def _scope(settings: Settings, org: str | None, project: str | None, user: str | None) -> Scope:
    from pml.wiring import scope_of

    local = scope_of(settings)
    return Scope(
        local.org if org is None else org,
        local.project if project is None else project,
        local.user if user is None else user,
    )


def _with_grants(
    ctx: typer.Context,
    config: Any,
    as_json: bool,
    action: Callable[[Settings, GrantService], Awaitable[T]],
) -> T:
    """Run ``action`` with the grants of the configured database (migrated on open)."""

    async def body() -> T:
        from pml.config import audit_file_path
        from pml.policy.audit import AuditLog
        from pml.policy.grant_stamp import grant_stamp_for
        from pml.policy.grants import GrantService
        from pml.policy.version import policy_version
        from pml.storage.database import Database

        settings = load_cli_settings(ctx, config)
        db = await Database.open(settings.database_url)
        try:
            # Grants and revocations are audited like the gateway's (file and table).
            audit = AuditLog(db, audit_file_path(settings))
            async with audit.running():
                service = GrantService(
                    db,
                    audit,
                    policy_version=policy_version(settings),
                    stamp=grant_stamp_for(settings),  # running gateways see the change at once
                )
                return await action(settings, service)
        finally:
            await db.close()

    return run_command(body, as_json=as_json)


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "never"


def _state(grant: Grant) -> str:
    from pml.storage.types import utc_now

    if grant.revoked:
        return "revoked"
    if grant.active(utc_now()):
        return "active"
    return "used up" if grant.max_uses is not None and grant.uses >= grant.max_uses else "expired"


def _limits(grant: Grant) -> str:
    parts = [f"path {grant.scope.path_prefix}"] if grant.scope.path_prefix else []
    parts += [f"domain {grant.scope.domain}"] if grant.scope.domain else []
    parts += ["these arguments only"] if grant.args_digest else []
    return ", ".join(parts) or "-"


def _print_grants(grants: list[Grant]) -> None:
    if not grants:
        typer.echo("no grants (issue one with `pml perms grant CAPABILITY --tool server:tool`)")
        return
    from rich.console import Console  # here: pml serve never prints a table
    from rich.table import Table

    table = Table("id", "user", "capability", "tool", "limits", "uses", "expires", "state")
    for grant in grants:
        uses = f"{grant.uses}/{grant.max_uses}" if grant.max_uses is not None else str(grant.uses)
        row = (
            grant.id,
            grant.principal,
            grant.capability,
            grant.scope.tool,
            _limits(grant),
            uses,
            _when(grant.to_dict()["expires_at"]),
            _state(grant),
        )
        table.add_row(*(safe_text(value) for value in row))
    Console().print(table)


def _describe(grant: Grant) -> str:
    uses = f", {grant.max_uses} use(s)" if grant.max_uses is not None else ""
    limits = _limits(grant)
    return (
        f"{grant.capability} on {grant.scope.tool} for {grant.principal} in "
        f"{grant.org}.{grant.project}{'' if limits == '-' else ', ' + limits}{uses}, "
        f"expires {_when(grant.to_dict()['expires_at'])}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``perms`` group to the ``pml`` application."""
    group = typer.Typer(help="Permission grants (allow a capability).", no_args_is_help=True)

    @group.command("list")
    def list_(
        ctx: typer.Context,
        include_all: Annotated[
            bool, typer.Option("--all", help="Include revoked, expired and used-up grants.")
        ] = False,
        org: OrgOption = None,
        project: ProjectOption = None,
        user: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List grants of the org/project: active ones, or all with --all."""

        async def action(settings: Settings, grants: GrantService) -> list[Grant]:
            scope = _scope(settings, org, project, None)
            return await grants.list(scope, principal=user, include_inactive=include_all)

        found = _with_grants(ctx, config, as_json, action)
        if as_json:
            print_json({"items": [grant.to_dict() for grant in found]})
            return
        _print_grants(found)

    @group.command("grant")
    def grant(
        ctx: typer.Context,
        capability: Annotated[
            str, typer.Argument(help="file_read, file_write, system_execute, network, ...")
        ],
        tool: Annotated[
            str, typer.Option("--tool", help="The tools it covers, a server:tool glob.")
        ] = "*:*",
        path_prefix: Annotated[
            str | None, typer.Option("--path-prefix", help="Only paths under this directory.")
        ] = None,
        domain: Annotated[
            str | None, typer.Option("--domain", help="Only URLs of this host and subdomains.")
        ] = None,
        ttl: Annotated[
            float | None,
            typer.Option("--ttl", help="Lifetime in seconds (default: session_grant_ttl_s)."),
        ] = None,
        forever: Annotated[bool, typer.Option("--forever", help="Never expires.")] = False,
        uses: Annotated[int | None, typer.Option("--uses", help="At most N calls.")] = None,
        purpose: Annotated[str | None, typer.Option("--purpose", help="Why (shown).")] = None,
        org: OrgOption = None,
        project: ProjectOption = None,
        user: Annotated[
            str | None, typer.Option("--user", help="Who may use it (default: you).")
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Issue a grant: CAPABILITY calls matching --tool are allowed without asking."""

        async def action(settings: Settings, grants: GrantService) -> Grant:
            if forever and ttl is not None:
                raise InvalidInput("Give --ttl or --forever, not both.", field="ttl")
            me = _scope(settings, None, None, None).user
            return await grants.issue(
                _scope(settings, org, project, user),
                capability=capability,
                tool_pattern=tool,
                path_prefix=path_prefix,
                domain=domain,
                purpose=purpose,
                ttl_s=None if forever else _ttl(ttl, settings),
                max_uses=uses,
                decided_by=f"user:{me}",
                actor="cli",
            )

        issued = _with_grants(ctx, config, as_json, action)
        if as_json:
            print_json(issued.to_dict())
            return
        typer.echo(f"granted {issued.id}: {_describe(issued)}")

    @group.command("revoke")
    def revoke(
        ctx: typer.Context,
        grant_id: Annotated[str, typer.Argument(metavar="ID", help="The grant's id.")],
        org: OrgOption = None,
        project: ProjectOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Revoke one grant: calls it covered ask (or are denied) again."""

        async def action(settings: Settings, grants: GrantService) -> Grant:
            scope = _scope(settings, org, project, None)
            return await grants.revoke(scope, grant_id, decided_by=f"user:{scope.user}")

        revoked = _with_grants(ctx, config, as_json, action)
        if as_json:
            print_json(revoked.to_dict())
            return
        typer.echo(f"revoked {revoked.id}: {_describe(revoked)}")

    @group.command("revoke-all")
    def revoke_all(
        ctx: typer.Context,
        user: Annotated[
            str | None, typer.Option("--user", help="Only this user's (default: everyone's).")
        ] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask to confirm.")] = False,
        org: OrgOption = None,
        project: ProjectOption = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Revoke every grant of the org/project (or of one user), after confirming."""

        async def action(settings: Settings, grants: GrantService) -> tuple[Scope, int]:
            scope = _scope(settings, org, project, None)
            whose = f"of {user}" if user is not None else "of every user"
            if not yes and not _confirm(f"Revoke every grant {whose} in {scope.key}?"):
                print("aborted: nothing revoked", file=sys.stderr)
                raise typer.Exit(code=1)
            count = await grants.revoke_all(scope, principal=user, decided_by=f"user:{scope.user}")
            return scope, count

        scope, count = _with_grants(ctx, config, as_json, action)
        if as_json:
            print_json({"revoked": count, "org": scope.org, "project": scope.project, "user": user})
            return
        typer.echo(f"revoked {count} grant(s) in {scope.key}")

    app.add_typer(group, name="perms")


def _ttl(ttl: float | None, settings: Settings) -> float:
    return ttl if ttl is not None else settings.permissions.session_grant_ttl_s


def _confirm(question: str) -> bool:
    """Ask on stderr (stdout stays clean for ``--json``); no answer means no."""
    try:
        return typer.confirm(question, default=False, err=True)
    except typer.Abort:  # no answer (end of input)
        print(file=sys.stderr)
        return False
