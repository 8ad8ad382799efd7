"""``pml audit tail`` and ``pml audit show``: the audit log of the configured database
(SPEC §10.6, §13).

    pml audit tail                               # the last 50 events, oldest first
    pml audit tail --org acme --event POLICY_DENIED --event PERMISSION_DENIED
    pml audit tail --follow --json               # JSON lines, streamed until Ctrl-C
    pml audit show 4f2a9c01d3e5b7a9 [--json]     # one request's pipeline record

One line per event: ``ts  event  org.project  decided_by  details``, with control and
bidi characters of stored text shown escaped. ``--json`` prints one object per line (the
fields of ``GET /api/audit`` items), so ``--follow --json`` is a stream a program can read.
``--follow`` asks for newer events every 0.5 s until Ctrl-C, which exits 0.

``show`` reads the events of one request id in the ``[scope]`` org/project (or ``--org`` /
``--project``) and prints its record (``pml.policy.pipeline_view``): ``--json`` the record as
one object, else a readable view (``pml.cli.audit_show``). A malformed id is
``INVALID_INPUT``; an id without events there is ``NOT_FOUND``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pml.cli.audit_show import record_lines
from pml.cli.common import ConfigOption, load_cli_settings, print_json, run_command
from pml.cli.status_cmd import safe_text
from pml.errors import InvalidInput

if TYPE_CHECKING:
    from pml.storage.audit_repo import AuditRow

MAX_LIMIT = 10_000
POLL_INTERVAL_S = 0.5
FOLLOW_BATCH = 500
SUMMARY_CHARS = 160
EVENT_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def _check(limit: int, events: list[str]) -> list[str]:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"Invalid --limit: {limit}. Use 1 to {MAX_LIMIT}.", field="limit")
    names = [event.strip().upper() for event in events]
    for name in names:
        if EVENT_NAME.fullmatch(name) is None:
            raise InvalidInput(
                f"Invalid --event: {name[:80]!r}. Use an event name such as POLICY_DENIED.",
                field="event",
            )
    return names


def _line(row: AuditRow) -> str:
    """One event as a line of plain text (stored strings escaped, details shortened)."""
    data = row.to_dict()
    summary = json.dumps(row.details, ensure_ascii=False, separators=(",", ":"))
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 1] + "…"
    parts = (
        data["ts"][:19].replace("T", " "),
        f"{row.event:<20}",
        data["scope"],
        row.decided_by or "-",
        summary,
    )
    return "  ".join(safe_text(part).plain for part in parts)


def _show(rows: list[AuditRow], as_json: bool) -> None:
    for row in rows:
        if as_json:
            print_json(row.to_dict())
        else:
            typer.echo(_line(row))


def register(app: typer.Typer) -> None:
    """Add the ``audit`` group to the ``pml`` application."""
    group = typer.Typer(help="The audit log of the policy pipeline.", no_args_is_help=True)

    @group.command("tail")
    def tail(
        ctx: typer.Context,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object per line.")
        ] = False,
        limit: Annotated[
            int, typer.Option("--limit", help=f"Show the last N events (1-{MAX_LIMIT}).")
        ] = 50,
        org: Annotated[str | None, typer.Option("--org", help="Only events of this org.")] = None,
        project: Annotated[
            str | None, typer.Option("--project", help="Only events of this project.")
        ] = None,
        event: Annotated[
            list[str] | None,
            typer.Option("--event", help="Only events of this name (repeatable)."),
        ] = None,
        config: ConfigOption = None,
        max_polls: Annotated[int | None, typer.Option("--max-polls", hidden=True)] = None,
    ) -> None:
        """Show the newest audit events, oldest first; with --follow, keep showing new ones."""
        names = event or []

        async def body() -> None:
            import anyio

            from pml.storage.audit_repo import AuditRepository
            from pml.storage.database import Database

            events = _check(limit, names) or None
            settings = load_cli_settings(ctx, config)
            db = await Database.open(settings.database_url)
            try:
                repo = AuditRepository(db)
                where: dict[str, Any] = {"org": org, "project": project, "events": events}
                rows = await repo.tail(after_id=None, limit=limit, **where)
                _show(rows, as_json)
                if not rows and not as_json and not follow:
                    typer.echo("no audit events", err=True)
                last = rows[-1].id if rows else 0
                polls = 0
                while follow and (max_polls is None or polls < max_polls):
                    await anyio.sleep(POLL_INTERVAL_S)
                    polls += 1
                    while True:  # a burst larger than one batch is read without waiting
                        rows = await repo.tail(after_id=last, limit=FOLLOW_BATCH, **where)
                        _show(rows, as_json)
                        last = rows[-1].id if rows else last
                        if len(rows) < FOLLOW_BATCH:
                            break
            finally:
                await db.close()

        try:
            run_command(body, as_json=as_json)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None

    @group.command("show")
    def show(
        ctx: typer.Context,
        request_id: Annotated[str, typer.Argument(help="The request id of the events.")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON.")] = False,
        org: Annotated[
            str | None, typer.Option("--org", help="Org of the request (default: [scope] org).")
        ] = None,
        project: Annotated[
            str | None,
            typer.Option("--project", help="Project of the request (default: [scope] project)."),
        ] = None,
        config: ConfigOption = None,
    ) -> None:
        """Show one request's pipeline: router, policy, tool calls, permissions, memory, timing."""

        async def body() -> dict[str, Any]:
            from pml.policy.pipeline_view import check_request_id, request_record
            from pml.storage.audit_repo import AuditRepository
            from pml.storage.database import Database

            checked = check_request_id(request_id)
            settings = load_cli_settings(ctx, config)
            db = await Database.open(settings.database_url)
            try:
                return await request_record(
                    AuditRepository(db),
                    org=settings.scope.org if org is None else org,
                    project=settings.scope.project if project is None else project,
                    request_id=checked,
                )
            finally:
                await db.close()

        record = run_command(body, as_json=as_json)
        if as_json:
            print_json(record)
            return
        for line in record_lines(record):
            typer.echo(line)

    app.add_typer(group, name="audit")
