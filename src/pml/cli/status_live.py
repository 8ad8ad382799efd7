"""The live half of ``pml status``: which gateways serve this config now, and what the newest
of them sees (asked over its control socket, ``pml.gateway.control``).

    live = ask_running_gateways(config_path)     # LiveView; .answer is None when none answered
    live.section()                               # the "gateway" object of ``pml status --json``

A gateway is found by the file it leaves in the run directory (``pml.gateway.running``); a
file left by a process that died is stale and ignored (and removed). Nothing here imports
the MCP SDK or SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

from pml.gateway.control_client import ControlUnavailable, ask_gateway
from pml.gateway.running import RunningGateway, run_directory, running_gateways

MAX_ASKED: Final = 3  # gateways asked, newest first, before giving up
MAX_SERVERS: Final = 500
MAX_TEXT: Final = 2000


def data_directory() -> Path:
    """Where ``pml serve`` leaves its files (the user's data directory for ``pml``)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("pml"))


def iso(seconds: float | None) -> str | None:
    """A Unix time as an ISO 8601 UTC string."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat()


@dataclass(slots=True)
class LiveView:
    """The gateways serving one config, and the answer of the newest that answered."""

    running: list[RunningGateway] = field(default_factory=list[RunningGateway])
    asked: RunningGateway | None = None
    answer: dict[str, Any] | None = None
    error: str | None = None

    def servers(self) -> dict[str, dict[str, Any]] | None:
        """The servers the gateway reported, by name (None without an answer)."""
        if self.answer is None:
            return None
        found: dict[str, dict[str, Any]] = {}
        for item in _list(self.answer.get("servers"))[:MAX_SERVERS]:
            if isinstance(item, dict):
                entry = cast(dict[str, Any], item)
                name = entry.get("name")
                if isinstance(name, str) and name:
                    found[name] = entry
        return found

    def section(self) -> dict[str, Any]:
        """The ``gateway`` object of ``pml status --json`` (the same keys in every case)."""
        shown = self.asked or (self.running[-1] if self.running else None)
        told: dict[str, Any] = _dict(self.answer.get("gateway")) if self.answer else {}
        others = [gateway for gateway in self.running if gateway is not shown]
        return {
            "running": bool(self.running),
            "answered": self.answer is not None,
            "pid": shown.pid if shown else None,
            "transport": shown.transport if shown else None,
            "config": (shown.config or None) if shown else None,
            "started_at": iso(shown.started_at) if shown else None,
            "uptime_s": _number(told.get("uptime_s")),
            "version": _text(told.get("version")),
            "host": _text(told.get("host")),
            "embedding_model": _text(told.get("embedding_model")),
            "embedding_process": _text(told.get("embedding_process")),
            "database": _dict(self.answer.get("database")) or None if self.answer else None,
            "capabilities": _dict(self.answer.get("capabilities")) or None if self.answer else None,
            "error": self.error,
            "others": [
                {
                    "pid": gateway.pid,
                    "transport": gateway.transport,
                    "started_at": iso(gateway.started_at),
                }
                for gateway in others
            ],
        }


def ask_running_gateways(config: Path | None, data_dir: Path | None = None) -> LiveView:
    """Find the gateways serving ``config`` and ask the newest ones, in turn, what they see."""
    directory = run_directory(data_dir if data_dir is not None else data_directory())
    view = LiveView(running=running_gateways(directory, config))
    errors: list[str] = []
    for gateway in list(reversed(view.running))[:MAX_ASKED]:
        if gateway.control_socket is None:
            continue
        try:
            answer = ask_gateway(gateway.control_socket)
        except ControlUnavailable as error:
            errors.append(f"pid {gateway.pid}: {error}")
            continue
        status = answer.get("status")
        if not isinstance(status, dict):
            errors.append(f"pid {gateway.pid}: {_refusal(answer)}")
            continue
        view.asked, view.answer = gateway, cast(dict[str, Any], status)
        return view
    view.error = "; ".join(errors) or None
    return view


def _refusal(answer: dict[str, Any]) -> str:
    error = _dict(answer.get("error"))
    message = error.get("message")
    return (
        f"it refused: {message[:MAX_TEXT]}"
        if isinstance(message, str)
        else "no status in its answer"
    )


def _list(value: object) -> list[object]:
    return cast(list[object], value) if isinstance(value, list) else []


def _dict(value: object) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
