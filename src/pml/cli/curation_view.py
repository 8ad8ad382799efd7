"""Curation on the command line: ``pml cap curate``'s run, and the last run in ``pml status``.

    answer = await run_curation(settings, {"mode": "suggest"}, environ=os.environ)
    print_curation(answer, Console())                  # suggestions, applied, skipped
    summary = await latest_curation(db, scope)          # for ``pml status`` (None if none)
    print_latest_curation(summary, Console())

Every string that comes from a capability or a model is printed as ``rich.text.Text``
(never parsed as markup), with control characters shown escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pml.cli.runtime import open_registry
from pml.config import Settings
from pml.registry.scope import Scope
from pml.storage.curation_repo import SqlCurationRepository
from pml.storage.database import Database

TOP_SUGGESTIONS: Final = 3


async def run_curation(
    settings: Settings, arguments: dict[str, Any], *, environ: Mapping[str, str]
) -> dict[str, Any]:
    """One ``cap_curate`` call in the configured scope (the LLM key read from ``environ``)."""
    # Imported here: the curation service brings the MCP types, which other pml commands
    # (pml cap list, pml status) must not pay for at start.
    from pml.curation import CurationService
    from pml.llm import llm_api_key, open_llm

    key = llm_api_key(settings.llm, environ)
    async with open_llm(settings.llm, api_key=key) as client, open_registry(settings) as session:
        service = CurationService(
            session.registry, session.db, settings=settings.curation, llm=client
        )
        return await service.call(session.scope, arguments)


def plain(value: object) -> Text:
    """``value`` as plain text: never markup, control characters escaped."""
    text = str(value)
    if not text.isprintable():
        text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
    return Text(text)


def print_curation(answer: Mapping[str, Any], console: Console) -> None:
    """A curation answer as tables: suggestions, applied renames, skipped ones."""
    suggestions: list[dict[str, Any]] = answer["suggestions"]
    if suggestions:
        table = Table(title="suggestions (ids: --json)")
        table.add_column("current name", no_wrap=True)
        table.add_column("suggested name", no_wrap=True)
        table.add_column("confidence", justify="right")
        table.add_column("reasoning", overflow="fold")
        for item in suggestions:
            cells = (
                item["currentName"],
                item["suggestedName"],
                f"{item['confidence']:.2f}",
                item["reasoning"],
            )
            table.add_row(*(plain(cell) for cell in cells))
        console.print(table)
    applied: list[dict[str, Any]] = answer["applied"]
    if applied:
        table = Table("old name", "new name", "fqdn", title="applied")
        for item in applied:
            table.add_row(*(plain(item[key]) for key in ("oldName", "newName", "fqdn")))
        console.print(table)
    skipped: list[dict[str, Any]] = answer["skipped"]
    if skipped:
        table = Table("id", "name", "reason", title="skipped")
        for item in skipped:
            table.add_row(*(plain(item[key]) for key in ("id", "name", "reason")))
        console.print(table)
    summary = (
        f"{answer['mode']}: {len(suggestions)} suggestions, {len(applied)} applied, "
        f"{len(skipped)} skipped"
    )
    if answer["mode"] != "apply":
        summary += f"; {answer['considered']} of {answer['matching']} matching capabilities"
        summary += f" considered (at most {answer['limit']} per call)"
    console.print(plain(summary + "."))


async def latest_curation(db: Database, scope: Scope) -> dict[str, Any] | None:
    """The scope's newest curation run, summarised for ``pml status``."""
    async with db.read() as conn:
        run = await SqlCurationRepository(conn).latest_run(scope.org, scope.project)
    if run is None:
        return None
    ranked = sorted(run.suggestions, key=lambda item: -_number(item.get("confidence")))
    return {
        "id": run.id,
        "created_at": run.created_at.isoformat(),
        "trigger": run.trigger,
        "mode": run.mode,
        "suggestions": len(run.suggestions),
        "applied": len(run.applied),
        "top": [
            {key: item.get(key) for key in ("currentName", "suggestedName", "confidence")}
            for item in ranked[:TOP_SUGGESTIONS]
        ],
    }


def print_latest_curation(summary: Mapping[str, Any] | None, console: Console) -> None:
    """One line for the newest run, then its best suggestions."""
    if summary is None:
        console.print(Text.assemble(("curation", "bold"), " no run yet (pml cap curate)"))
        return
    when = str(summary["created_at"])[:19].replace("T", " ")
    line = (
        f"last run {when} ({summary['trigger']}, {summary['mode']}): "
        f"{summary['suggestions']} suggestions, {summary['applied']} applied"
    )
    console.print(Text.assemble(("curation", "bold"), " ", plain(line)))
    for item in summary["top"]:
        confidence = _number(item.get("confidence"))
        console.print(
            plain(f"  {item['currentName']} -> {item['suggestedName']} ({confidence:.2f})")
        )


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
