"""``pml cap archive|restore|purge|deprecate|tag``: the life of a capability (SPEC §14).

    pml cap archive fs:read_json [--force]         # dependants are named, --force goes on
    pml cap restore fs:read_json [--name NEW]      # NEW when the name was taken meanwhile
    pml cap purge fs:read_json                     # archived only; asks on your terminal
    pml cap deprecate old --replaced-by new --message "use new"   (--undo takes it back)
    pml cap tag fs:read_json@v2 v1.2.0

Purging deletes for good, so it is a person's act: it needs an interactive terminal and
the capability's name typed back (``--yes`` skips the typing, not the terminal).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from pml.cli.common import ConfigOption, JsonOption, load_cli_settings, print_json, run_command
from pml.errors import Forbidden

if TYPE_CHECKING:
    from pml.cli.runtime import RegistrySession
    from pml.registry.lifecycle import CapabilityLifecycle
    from pml.registry.models import CapabilityRecord

T = TypeVar("T")
NameArgument = Annotated[str, typer.Argument(help="Display name, FQDN or id.")]
NO_TERMINAL = (
    "pml cap purge needs a person at an interactive terminal (stdin is not one): run it in "
    "your own shell"
)


def _run(
    ctx: typer.Context,
    config: Any,
    as_json: bool,
    action: Callable[[CapabilityLifecycle, RegistrySession], Awaitable[T]],
) -> T:
    async def body() -> T:
        # Imported here: the registry brings SQLAlchemy, which ``pml --help`` must not pay for.
        from pml.cli.runtime import open_registry
        from pml.registry.lifecycle import CapabilityLifecycle

        async with open_registry(load_cli_settings(ctx, config)) as session:
            return await action(CapabilityLifecycle(session.registry), session)

    return run_command(body, as_json=as_json)


def summary(record: CapabilityRecord) -> dict[str, Any]:
    """A record as listings show it (``pml.registry.tools.summary``, imported when used)."""
    from pml.registry.tools import summary as listed

    return listed(record)


def _show(result: dict[str, Any], as_json: bool, line: str) -> None:
    if as_json:
        print_json(result)
    else:
        typer.echo(line)


def register(group: typer.Typer) -> None:
    """Add the lifecycle verbs to the ``cap`` group."""

    @group.command("archive")
    def archive(
        ctx: typer.Context,
        name: NameArgument,
        force: Annotated[
            bool, typer.Option("--force", help="Archive even if other capabilities use it.")
        ] = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Archive a capability: out of lists, tools and discovery; its name is freed."""

        async def action(life: CapabilityLifecycle, s: RegistrySession) -> dict[str, Any]:
            record, dependants = await life.archive(s.scope, name, force=force)
            return summary(record) | {"dependants": [summary(d) for d in dependants]}

        result = _run(ctx, config, as_json, action)
        line = f"archived {result['display_name']} ({result['fqdn']})"
        if result["dependants"]:
            names = ", ".join(item["display_name"] for item in result["dependants"])
            line += f"; still used by: {names}"
        _show(result, as_json, line)

    @group.command("restore")
    def restore(
        ctx: typer.Context,
        name: NameArgument,
        new_name: Annotated[
            str | None, typer.Option("--name", help="Restore under this name (if taken).")
        ] = None,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Bring an archived capability back (by the name it had, its FQDN or id)."""

        async def action(life: CapabilityLifecycle, s: RegistrySession) -> dict[str, Any]:
            restored = await life.restore(s.scope, name, new_name=new_name)
            return summary(restored.record) | {"aliasesDropped": restored.aliases_dropped}

        result = _run(ctx, config, as_json, action)
        line = f"restored {result['display_name']} ({result['fqdn']})"
        if result["aliasesDropped"]:
            line += f"; aliases taken meanwhile: {', '.join(result['aliasesDropped'])}"
        _show(result, as_json, line)

    @group.command("purge")
    def purge(
        ctx: typer.Context,
        name: NameArgument,
        yes: Annotated[bool, typer.Option("--yes", help="Do not ask to type the name.")] = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Delete an archived capability for good (its versions and traces too)."""

        async def action(life: CapabilityLifecycle, s: RegistrySession) -> dict[str, Any]:
            if not sys.stdin.isatty():
                raise Forbidden(NO_TERMINAL)
            await life.archived(s.scope, name)  # NOT_FOUND before asking anything
            if not yes:
                typed = typer.prompt(f"Type {name!r} to delete it for good", err=True)
                if typed != name:
                    print("not purged: the name typed does not match", file=sys.stderr)
                    raise typer.Exit(code=1)
            record = await life.purge(s.scope, name)
            return {"purged": record.fqdn, "display_name": record.display_name}

        result = _run(ctx, config, as_json, action)
        _show(result, as_json, f"purged {result['display_name']} ({result['purged']})")

    @group.command("deprecate")
    def deprecate(
        ctx: typer.Context,
        name: NameArgument,
        replaced_by: Annotated[
            str | None, typer.Option("--replaced-by", help="The capability to use instead.")
        ] = None,
        message: Annotated[
            str | None, typer.Option("--message", help="What callers are told.")
        ] = None,
        undo: Annotated[bool, typer.Option("--undo", help="No longer deprecated.")] = False,
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Mark a capability deprecated: every answer about it carries a warning."""

        async def action(life: CapabilityLifecycle, s: RegistrySession) -> dict[str, Any]:
            record = await life.deprecate(
                s.scope, name, replaced_by=replaced_by, message=message, undo=undo
            )
            return summary(record) | (record.deprecation or {})

        result = _run(ctx, config, as_json, action)
        if undo:
            line = f"{result['display_name']} is no longer deprecated"
        else:
            line = f"deprecated {result['display_name']}: {result['deprecated']}"
        _show(result, as_json, line)

    @group.command("tag")
    def tag(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="NAME or NAME@vN (default: current version).")],
        version_tag: Annotated[str, typer.Argument(help="A semantic version, e.g. v1.2.0.")],
        config: ConfigOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Tag a version with a semantic version (immutable once set)."""

        async def action(life: CapabilityLifecycle, s: RegistrySession) -> dict[str, Any]:
            version = await life.tag(s.scope, name, version_tag)
            return {
                "fqdn": version.capability_fqdn,
                "version": version.version,
                "version_tag": version.version_tag,
            }

        result = _run(ctx, config, as_json, action)
        line = f"tagged version {result['version']} {result['version_tag']} ({result['fqdn']})"
        _show(result, as_json, line)
