"""Finding the gateways that run with a config file: one small file per serving process.

    with announced(run_directory(data_dir), config, transport="stdio"):   # pml serve
        ...                                              # <dir>/<key>-<pid>.json, mode 0600
    told = tell_to_reload(running_gateways(run_directory(data_dir), config))   # pml reload
    gateway.control_socket                               # <dir>/<key>-<pid>.sock (pml status)

A file is keyed by the absolute path of the config the process was started with (none when
it runs on defaults) and removed when the process ends. One left by a process that died
without cleaning up (SIGKILL) is stale: its pid no longer runs, or runs another program
started at another time (a reused pid). Stale and unreadable files are skipped, and stale
ones removed by the next look, with the control socket a killed process left beside its file
(``control.py``). Nothing here imports the MCP SDK (``pml reload`` stays quick).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import signal
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

RUN_DIRECTORY: Final = "run"
MAX_FILE_BYTES: Final = 4096
MAX_FILES: Final = 10_000  # a directory holding more is not ours to read through


@dataclass(frozen=True, slots=True)
class RunningGateway:
    """One serving process, as its file describes it."""

    pid: int
    config: str
    transport: str
    started_at: float
    control_socket: Path | None = None  # where it answers ``pml status`` (control.py)


def run_directory(data_dir: Path) -> Path:
    """Where serving processes leave their files (``<data dir>/run``)."""
    return data_dir / RUN_DIRECTORY


def find_config(explicit: Path | None, environ: Mapping[str, str], cwd: Path) -> Path | None:
    """The config file ``load_settings`` reads (``--config``, ``$PML_CONFIG``, ``./pml.toml``),
    as an absolute path; None when there is none (a missing explicit file is still named)."""
    if explicit is not None:
        return _absolute(cwd / explicit.expanduser())
    from_env = environ.get("PML_CONFIG")
    if from_env:
        return _absolute(cwd / Path(from_env).expanduser())
    default = cwd / "pml.toml"
    return _absolute(default) if default.exists() else None


def _absolute(path: Path) -> Path:
    # Symlinks stay as they are: a reload follows a link that was pointed elsewhere.
    return Path(os.path.abspath(path))


def control_socket_path(announcement: Path) -> Path:
    """The control socket beside an announcement file (``<key>-<pid>.sock``)."""
    return announcement.with_suffix(".sock")


def config_key(config: Path | None) -> str:
    """A short, file-name-safe key of a config path."""
    text = str(config) if config is not None else ""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:24]


@contextlib.contextmanager
def announced(directory: Path, config: Path | None, *, transport: str) -> Generator[Path | None]:
    """Leave this process's file while the block runs (None when it cannot be written:
    serving goes on, ``pml reload`` just does not find this process)."""
    path = directory / f"{config_key(config)}-{os.getpid()}.json"
    record = {
        "pid": os.getpid(),
        "config": str(config) if config is not None else "",
        "transport": transport,
        "started_at": time.time(),
        "process_start": _process_start(os.getpid()),
    }
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_private(path, json.dumps(record).encode())
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def running_gateways(directory: Path, config: Path | None) -> list[RunningGateway]:
    """The live processes serving ``config``, oldest first (stale files removed)."""
    prefix = f"{config_key(config)}-"
    found: list[RunningGateway] = []
    try:
        entries = list(itertools.islice(directory.iterdir(), MAX_FILES))
    except OSError:
        return []
    wanted = str(config) if config is not None else ""
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".json")):
            continue
        record = _read_record(entry)
        if record is None or record.config != wanted:
            continue  # unreadable, or another config whose key collides: never ours to touch
        if _alive(record):
            found.append(record.gateway)
        else:
            for stale in (entry, control_socket_path(entry)):
                with contextlib.suppress(OSError):
                    stale.unlink()
    return sorted(found, key=lambda gateway: (gateway.started_at, gateway.pid))


@dataclass(frozen=True, slots=True)
class _Record:
    gateway: RunningGateway
    process_start: str | None

    @property
    def pid(self) -> int:
        return self.gateway.pid

    @property
    def config(self) -> str:
        return self.gateway.config


def _read_record(path: Path) -> _Record | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        loaded: object = json.loads(data.decode("utf-8")) if len(data) <= MAX_FILE_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict):
        return None
    fields = cast(dict[str, Any], loaded)
    pid, config = fields.get("pid"), fields.get("config")
    transport, started = fields.get("transport"), fields.get("started_at")
    process_start = fields.get("process_start")
    if not (isinstance(pid, int) and not isinstance(pid, bool) and 1 < pid < 2**22):
        return None
    if not (isinstance(config, str) and isinstance(transport, str)):
        return None
    if not isinstance(started, int | float) or isinstance(started, bool):
        return None
    gateway = RunningGateway(
        pid, config, transport[:100], float(started), control_socket=control_socket_path(path)
    )
    return _Record(gateway, process_start if isinstance(process_start, str) else None)


def _alive(record: _Record) -> bool:
    pid = record.pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process holds that pid now
    started = _process_start(pid)
    # A reused pid runs a process that started at another time (Linux /proc; elsewhere the
    # pid's liveness is all there is to check).
    return started is None or started == record.process_start


def _process_start(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (``/proc/<pid>/stat``, field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) whole or not at all."""
    temporary = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def tell_to_reload(gateways: list[RunningGateway]) -> list[RunningGateway]:
    """Send each gateway SIGHUP; those that were told (one may have ended meanwhile)."""
    told: list[RunningGateway] = []
    for gateway in gateways:
        try:
            os.kill(gateway.pid, signal.SIGHUP)
        except (ProcessLookupError, PermissionError):
            continue
        told.append(gateway)
    return told
