"""A cheap "grants changed" signal between the processes sharing one SQLite database.

    stamp = FileStamp(Path("/data/pml.db.grants"))
    before = stamp.token()        # (inode, size, mtime) of the stamp file, or None
    ...                           # another process issues or revokes a grant: stamp.bump()
    stamp.token() != before       # True: cached grants must be read again

Every grant write (issue, spend, revoke, purge) appends one byte to the stamp file after
it commits; a reader compares the file's ``stat`` (about a microsecond) with what it saw
when it read the grants. The file is replaced by an empty one (a new inode) past 4 KB. A
stamp that cannot be read or written makes ``token()`` None: callers then trust nothing
and read the database. PostgreSQL deployments have no stamp (they read the grant's row).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Final, Protocol

from pml.config import Settings

logger = logging.getLogger(__name__)

ROTATE_BYTES: Final = 4096


class GrantStamp(Protocol):
    """What tells a process that another one changed grants."""

    def token(self) -> object | None:
        """A value that changes whenever grants change (None: unknown, trust nothing)."""
        ...

    def bump(self) -> None:
        """Say that grants changed (after the change has committed)."""
        ...


class FileStamp:
    """The stamp file beside an SQLite database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._warned = False

    def token(self) -> object | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def bump(self) -> None:
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(descriptor, b".")
                size = os.fstat(descriptor).st_size
            finally:
                os.close(descriptor)
            if size > ROTATE_BYTES:
                fresh = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                fresh.write_bytes(b"")
                os.chmod(fresh, 0o600)
                os.replace(fresh, self.path)
        except OSError as error:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "grant stamp %s not written (%s): grants are re-read", self.path, error
                )
            self._break()

    def _break(self) -> None:
        """After a failed bump the file must not look unchanged: remove it (token None)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def grant_stamp_for(settings: Settings) -> FileStamp | None:
    """The stamp of an SQLite database file (``<database>.grants``); None otherwise."""
    prefix = "sqlite:///"
    url = settings.database_url
    if not url.startswith(prefix) or ":memory:" in url:
        return None
    database = Path(url[len(prefix) :].split("?", 1)[0]).expanduser()
    return FileStamp(database.with_name(database.name + ".grants"))
