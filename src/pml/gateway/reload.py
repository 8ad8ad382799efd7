"""Live reload: a running gateway re-reads its config (``SIGHUP``, ``pml reload``).

    reloader = Reloader(gateway, load=lambda: load_settings(path, environ=environ))
    report = await reloader.reload()          # now; a refused config leaves the old one
    with sighup_requests() as requests:       # SIGHUP asks for a reload
        async with reloader.serving(requests):    # served one at a time, coalesced
            ...

A reload reads the new settings, compares them with those in force (``settings_diff``) and
builds everything it will swap in before touching anything, so that an invalid config (a
file that cannot be read, a bad pattern) is refused as a whole with one log line. Then
policy, permissions, routing and sandbox limits are swapped into the objects that hold them
(the next call decides with them), the upstream pool follows the server list (added ones
start, removed ones stop, changed ones restart; the others keep their sessions), stored
routing is re-derived when ``[routing]`` changed, and connected clients are told to list
their tools again. Settings that only a restart can apply (the database, the scope, ...)
are named in the log line and left as they are; the rest applies all the same.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import stat
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import anyio

from pml.config import Settings, UpstreamSettings, load_settings
from pml.errors import ConfigError, PmlError
from pml.gateway.background import in_background
from pml.upstream.pool import PoolChanges
from pml.upstream.transport import UpstreamTarget

if TYPE_CHECKING:
    from pml.gateway.server import Gateway

logger = logging.getLogger(__name__)

# Sections a reload applies; every other setting (and any setting added later) needs a restart.
LIVE: Final = frozenset(
    {"servers", "servers_file", "upstream", "routing", "sandbox", "policy", "permissions", "log"}
)
# Keys of live sections that are read once, at start.
RESTART_KEYS: Final = {
    "routing": ("trace_claim_lease_s",),
    "policy": ("debug_routing", "llm_min_confidence"),
    "sandbox": ("workers",),
}
LOAD_TIMEOUT_S: Final = 30.0  # a config that takes longer to read is refused
MAX_CONFIG_BYTES: Final = 4_000_000  # far beyond any real pml.toml; never read into memory


@dataclass(frozen=True, slots=True)
class SettingsDiff:
    """Which settings differ: ``changed`` (top-level names) and ``restart`` (those of them,
    or their keys, that a reload cannot apply)."""

    changed: frozenset[str] = frozenset()
    restart: tuple[str, ...] = ()

    def touches(self, *names: str) -> bool:
        """Whether any of ``names`` changed."""
        return any(name in self.changed for name in names)

    @property
    def live(self) -> tuple[str, ...]:
        """The changed settings a reload applies, sorted."""
        return tuple(sorted(self.changed & LIVE))


def settings_diff(old: Settings, new: Settings) -> SettingsDiff:
    """Compare two settings field by field (unknown fields count as restart-only)."""
    changed = frozenset(
        name for name in type(old).model_fields if getattr(old, name) != getattr(new, name)
    )
    restart: list[str] = []
    for name in sorted(changed):
        if name not in LIVE:
            restart.append(name)
            continue
        before, after = getattr(old, name), getattr(new, name)
        restart.extend(
            f"{name}.{key}"
            for key in RESTART_KEYS.get(name, ())
            if getattr(before, key) != getattr(after, key)
        )
    return SettingsDiff(changed, tuple(restart))


def in_force(old: Settings, new: Settings, restart: Iterable[str]) -> Settings:
    """``new``, with the ``restart`` settings (``name`` or ``section.key``) still as ``old``
    has them: what runs after a reload."""
    kept: dict[str, Any] = {}
    for item in restart:
        section, _, key = item.partition(".")
        if not key:
            kept[section] = getattr(old, section)
            continue
        current: Any = kept.get(section, getattr(new, section))
        kept[section] = current.model_copy(update={key: getattr(getattr(old, section), key)})
    return new.model_copy(update=kept)


def check_config_file(path: Path) -> None:
    """Refuse (``CONFIG_ERROR``) what cannot be a config: gone, not a regular file (a FIFO
    would block the read), or too big."""
    try:
        found = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError(f"{path}: not a regular file")
    if found.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: {found.st_size} bytes, more than a config may hold ({MAX_CONFIG_BYTES})"
        )


def config_loader(
    path: Path | None,
    *,
    environ: Mapping[str, str],
    cwd: Path,
    adjust: Callable[[Settings], Settings] = lambda settings: settings,
) -> Callable[[], Settings]:
    """What a reload reads: ``path`` (as found at start) with a copy of ``environ`` taken now,
    relative paths from ``cwd``; ``adjust`` re-applies command-line switches."""
    frozen = dict(environ)

    def load() -> Settings:
        if path is not None:
            check_config_file(path)
        return adjust(load_settings(path, environ=frozen, cwd=cwd))

    return load


@dataclass(frozen=True, slots=True)
class ReloadReport:
    """What one reload did (``refused``: why nothing was applied)."""

    applied: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()
    servers: PoolChanges = field(default_factory=PoolChanges)
    refused: str | None = None

    def line(self) -> str:
        """The one log line an operator reads."""
        if self.refused is not None:
            return f"reload refused, the running config stays in force: {self.refused}"
        if not self.applied and not self.restart:
            return "reloaded: no change"
        parts: list[str] = []
        changes = self.servers
        for label, names in (
            ("added", changes.added),
            ("removed", changes.removed),
            ("restarted", changes.restarted),
            ("failed to start", changes.failed),
        ):
            if names:
                parts.append(f"servers {label}: {', '.join(names)}")
        if self.applied:
            parts.append("applied: " + ", ".join(f"[{name}]" for name in self.applied))
        if self.restart:
            parts.append("needs a restart (not applied): " + ", ".join(self.restart))
        return "reloaded: " + "; ".join(parts)


@runtime_checkable
class ReconfigurablePool(Protocol):
    """A pool that can follow a new server list (``pml.upstream.pool.ClientPool``)."""

    def targets(self) -> dict[str, UpstreamTarget]: ...

    async def reconfigure(
        self, servers: Mapping[str, UpstreamTarget], *, settings: UpstreamSettings | None = None
    ) -> PoolChanges: ...


class ReloadRequests:
    """Reload requests, coalesced: any number made while a reload runs make one more."""

    def __init__(self) -> None:
        self._pending = False
        self._wake: anyio.Event | None = None

    @property
    def pending(self) -> bool:
        """Whether a request waits to be served."""
        return self._pending

    def request(self) -> None:
        """Ask for a reload (from the event loop's thread)."""
        self._pending = True
        if self._wake is not None:
            self._wake.set()

    async def next(self) -> None:
        """Wait for a request and take it (with every other one made meanwhile)."""
        while not self._pending:
            self._wake = anyio.Event()
            await self._wake.wait()
        self._pending = False


class Reloader:
    """Reloads one open gateway from ``load()`` (the same file and environment as at start)."""

    def __init__(
        self,
        gateway: Gateway,
        load: Callable[[], Settings],
        *,
        load_timeout_s: float = LOAD_TIMEOUT_S,
    ) -> None:
        self._gateway = gateway
        self._load = load
        self._load_timeout_s = load_timeout_s
        self._lock = anyio.Lock()
        self.reloads = 0  # reloads finished (applied, unchanged or refused)

    @asynccontextmanager
    async def serving(self, requests: ReloadRequests) -> AsyncGenerator[None]:
        """Reload on each request while the block runs (never two at once). An exception of
        the block is raised as it is, not wrapped by the task group."""
        async with in_background(lambda: self._serve(requests)):
            yield

    async def _serve(self, requests: ReloadRequests) -> None:
        while True:
            await requests.next()
            try:
                await self.reload()
            except Exception:  # the reload loop's top level: log it, keep serving
                logger.exception("reload failed; the running config stays in force")

    async def reload(self) -> ReloadReport:
        """Read the config again and apply what changed; log and return what happened."""
        async with self._lock:
            report = await self._reload()
            self.reloads += 1
        if report.refused is not None:
            logger.error("%s", report.line())
        else:
            logger.warning("%s", report.line())
        return report

    async def _reload(self) -> ReloadReport:
        try:
            with anyio.fail_after(self._load_timeout_s):
                new = await anyio.to_thread.run_sync(self._load, abandon_on_cancel=True)
        except TimeoutError:
            waited = self._load_timeout_s
            return ReloadReport(refused=f"the config was not read within {waited:g} s")
        except PmlError as error:
            return ReloadReport(refused=error.message)
        old = self._gateway.settings
        diff = settings_diff(old, new)
        if not diff.changed:
            return ReloadReport()
        from pml.gateway.reload_apply import apply_settings, prepare

        try:
            prepared = prepare(self._gateway, new, diff)
        except PmlError as error:  # e.g. a permission pattern that does not compile
            return ReloadReport(refused=error.message)
        servers = await apply_settings(self._gateway, prepared)
        self._gateway.settings = in_force(old, new, prepared.restart)
        return ReloadReport(applied=prepared.applied, restart=prepared.restart, servers=servers)


@dataclass(frozen=True, slots=True)
class ReloadSource:
    """How a serving process reloads: ``load()`` reads its config again (same file, same
    environment), ``requests`` come from SIGHUP, and ``announce()`` leaves the file by
    which ``pml reload`` finds the process while it serves."""

    load: Callable[[], Settings]
    requests: ReloadRequests
    announce: Callable[[], AbstractContextManager[object]] = nullcontext


@asynccontextmanager
async def reloading(gateway: Gateway, source: ReloadSource | None) -> AsyncGenerator[None]:
    """Serve ``source``'s reload requests for ``gateway`` while the block runs."""
    if source is None:
        yield
        return
    async with Reloader(gateway, source.load).serving(source.requests):
        yield


@contextmanager
def sighup_requests() -> Generator[ReloadRequests]:
    """SIGHUP asks for a reload (instead of ending the process) while the block runs."""
    requests = ReloadRequests()
    if threading.current_thread() is not threading.main_thread():
        yield requests  # signals reach the main thread only
        return
    loop = asyncio.get_running_loop()

    def handler(_number: int, _frame: object) -> None:
        loop.call_soon_threadsafe(requests.request)

    previous = signal.signal(signal.SIGHUP, handler)
    try:
        yield requests
    finally:
        signal.signal(signal.SIGHUP, previous)
