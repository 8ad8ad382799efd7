"""``pml status`` as text: who answers (a live gateway, or the stored state, labelled so), the
database, counts, the servers table, curation, tool usage, flagged definitions.

    print_status(report, Console())

Every string that comes from the user or from an upstream server is printed as
``rich.text.Text`` (``safe_text``), never parsed as markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pml.cli.curation_view import print_latest_curation
from pml.cli.status_cmd import safe_text


def _label(name: str, *parts: str) -> Text:
    """``name`` in bold followed by plain ``parts`` (never parsed as markup)."""
    return Text.assemble((name, "bold"), " ", *(safe_text(part) for part in parts))


def _when(iso: str | None) -> str:
    return (iso or "")[:19].replace("T", " ")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _usage_table(usage: list[dict[str, Any]]) -> Table:
    table = Table("server", "tool", "calls", "success", "avg latency", "last call",
                  title="tool calls in this scope (most called first)")  # fmt: skip
    for row in usage:
        rate = row["successes"] / row["calls"] if row["calls"] else 0.0
        cells = (
            row["server_id"],
            row["tool_name"],
            str(row["calls"]),
            f"{rate:.0%}",
            f"{row['avg_latency_ms']:.1f} ms",
            (row["last_called_at"] or "-")[:19].replace("T", " "),
        )
        table.add_row(*(safe_text(cell) for cell in cells))
    return table


def _database_line(database: dict[str, Any]) -> Text:
    if not database["exists"]:
        return _label("database", f"{database['url']} does not exist yet; {database['hint']}")
    if database["reachable"] is False:
        return _label("database", f"{database['url']} is unreachable: {database['error']}")
    state = "up to date" if database["up_to_date"] else "needs `pml db upgrade`"
    return _label(
        "database",
        f"{database['url']} ({database['backend']}, "
        f"revision {database['revision'] or 'none'}, {state})",
    )


def _gateway_lines(report: dict[str, Any]) -> list[Text]:
    """Whether a gateway runs with this config, and where the servers' states come from."""
    gateway: dict[str, Any] | None = report.get("gateway")
    if gateway is None:
        return []
    source = report["servers_source"]
    if not gateway["running"]:
        where = gateway_config_shown(report)
        if source == "stored":
            latest = max(
                (s["updated_at"] or "" for s in report["servers"] if s["reported"]), default=""
            )
            tail = f"servers show the last state stored in the database, as of {_when(latest)} UTC"
        else:
            tail = "no server state has been stored yet"
        return [_label("gateway", f"no gateway is running for {where}; {tail}")]
    lines: list[Text] = []
    if gateway["answered"]:
        model = gateway["embedding_model"]
        lines.append(
            _label(
                "gateway",
                f"running: pid {gateway['pid']} ({gateway['transport']}), "
                f"up {_duration(gateway['uptime_s'])}"
                + (f", embedding model {model}" if model else "")
                + (f" in {where}" if model and (where := gateway["embedding_process"]) else "")
                + "; servers as it sees them now",
            )
        )
        seen: dict[str, Any] | None = gateway["database"]
        if seen is not None and seen.get("url") != report["database"]["url"]:
            lines.append(_label("gateway database", f"{seen.get('url')} (not the one above)"))
        if seen is not None and seen.get("reachable") is False:
            lines.append(
                _label("gateway database", f"unreachable from the gateway: {seen.get('error')}")
            )
    else:
        lines.append(
            _label(
                "gateway",
                f"pid {gateway['pid']} ({gateway['transport']}) runs but did not answer "
                f"({gateway['error']}); servers show the last stored state, not a live one",
            )
        )
    for other in gateway["others"]:
        lines.append(_label("also running", f"pid {other['pid']} ({other['transport']})"))
    return lines


def gateway_answered(report: dict[str, Any]) -> bool:
    """Whether a running gateway answered (its line names the embedding model)."""
    gateway = report.get("gateway")
    return bool(gateway and gateway.get("answered"))


def gateway_config_shown(report: dict[str, Any]) -> str:
    """The config named in "no gateway is running for ..."."""
    config = report.get("config")
    return str(config) if config else "the default settings (no config file)"


def _servers_table(servers: list[dict[str, Any]], source: str) -> Table:
    title = {"live": "upstream servers (live)", "stored": "upstream servers (last stored state)"}
    table = Table(
        "server", "transport", "target", "state", "tools", "latency", "flagged", "reported",
        title=title.get(source, "upstream servers"),
    )  # fmt: skip
    for server in servers:
        tools = server["tool_count"] if server["reported"] else server["catalog_tools"]
        latency = server["last_latency_ms"]
        if server["source"] == "live":
            reported = "now"
        elif server["reported"]:
            reported = f"{_when(server['updated_at'])} by {server['reported_by']}"
        else:
            reported = "-"
        cells = (
            server["name"],
            server["transport"] or "-",
            server["target"] or "-",
            server["state"],
            "-" if tools is None else str(tools),
            "-" if latency is None else f"{latency:.1f} ms",
            ", ".join(server["flagged_tools"]) or "-",
            reported,
        )
        table.add_row(*(safe_text(cell) for cell in cells))
    return table


def print_status(report: dict[str, Any], console: Console) -> None:
    """The report as plain text."""
    for line in _gateway_lines(report):
        console.print(line)
    console.print(_database_line(report["database"]))
    scope = report["scope"]
    console.print(_label("scope", f"{scope['org']}.{scope['project']} as {scope['user']}"))
    counts = report["capabilities"]
    if counts is not None:
        console.print(
            _label(
                "capabilities",
                f"{counts['named']} named, {counts['unnamed']} unnamed; "
                f"{counts['mcp_servers']} MCP server records",
            )
        )
    failing = report.get("failing")
    if failing is not None and failing["count"]:
        shown = ", ".join(failing["names"])
        more = failing["count"] - len(failing["names"])
        console.print(
            _label(
                "failing",
                f"{failing['count']} keep failing (under half of their last runs succeeded): "
                + shown
                + (f" and {more} more" if more > 0 else ""),
            )
        )
    embedding = report.get("embedding")
    if embedding is not None and not (gateway_answered(report) and embedding["model"]):
        model = embedding["model"] or f"none ({embedding.get('error')})"
        console.print(_label("embedding model", str(model)))
    keys = report["api_keys"]
    if keys is not None:
        console.print(_label("api keys", f"{keys['active']} active, {keys['revoked']} revoked"))
    catalog = report["catalog"]
    if catalog is not None:
        console.print(
            _label("tool catalog", f"{catalog['tools']} tools, {len(catalog['flagged'])} flagged")
        )
    servers = report["servers"]
    if servers:
        console.print(_servers_table(servers, report.get("servers_source", "none")))
        for server in servers:
            if server["last_error"]:
                console.print(safe_text(f"{server['name']}: last error: {server['last_error']}"))
    else:
        console.print(safe_text("no upstream servers configured (add [servers.NAME] to pml.toml)"))
    if report["capabilities"] is not None:
        print_latest_curation(report["curation"], console)
    usage = report["tool_usage"]
    if usage:
        console.print(_usage_table(usage))
    if catalog is not None and catalog["flagged"]:
        console.print(_label("flagged tool definitions", "(changed since first seen):"))
        for item in catalog["flagged"]:
            changed = (item["updated_at"] or "")[:19].replace("T", " ")
            console.print(safe_text(f"  {item['server']}:{item['tool']} (changed {changed})"))
