"""Point reads on PostgreSQL straight through the driver: the request path's hot lookups.

    reads = PostgresPointReads(engine)
    if reads.accepts(BY_HASH_STATEMENT):      # False: the caller reads through SQLAlchemy
        done, row = await reads.read(BY_HASH_STATEMENT, {"key_hash": digest})  # sa.Row | None
        # done is False when its connections are all in use: SQLAlchemy's pool waits
    await reads.close()

Every call of a shared gateway reads its API key and its code's capability by index. Through
SQLAlchemy each read cost ~200 µs of the event loop (checkout, execution context, result
objects, return) around ~15 µs of driver work; on a loaded gateway that was a tenth of its
CPU per call. Here a statement is compiled once, and each read borrows one of a few
connections of its own (autocommit, asyncpg's statement cache) for one ``fetchrow``; when
all are lent, the read goes through SQLAlchemy as before.

Only statements whose parameters and columns asyncpg converts as SQLAlchemy's adapter does
take this path (strings, numbers, booleans, timestamps with a time zone, and type decorators
over them, whose own conversions are applied: ``accepts``); the rest (JSON, arrays, IN
lists...), statements built with their values rather than bind parameters (not kept: they
would crowd the constant ones out) and statements past ``MAX_STATEMENTS`` keep
SQLAlchemy's. A refused value is a
``StorageError`` as there; a broken connection or a failed connect hands the read to
SQLAlchemy, whose pool reconnects or reports why it cannot.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler

from pml.errors import StorageError

MAX_CONNECTIONS: Final = 4  # a point read holds one for a single round trip
MAX_STATEMENTS: Final = 32  # the request path's constant statements; others are not kept
_PLAIN: Final = (sa.String, sa.Integer, sa.Boolean, sa.Float)
_ADAPTER_OPTIONS: Final = (
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "async_fallback",
    "async_creator_fn",
)


_Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]  # bind parameters, in ``$n`` order
    defaults: Mapping[str, Any]  # values bound in the statement itself
    binds: tuple[_Processor, ...]  # SQLAlchemy's conversion of each parameter, if any
    results: tuple[_Processor, ...]  # and of each column
    columns: SimpleResultMetaData

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        """The driver's arguments, in order."""
        found = [params[name] if name in params else self.defaults[name] for name in self.names]
        return [
            v if f is None or v is None else f(v) for f, v in zip(self.binds, found, strict=True)
        ]

    def row(self, record: Any) -> sa.Row[Any] | None:
        """The ``sa.Row`` SQLAlchemy would have made of the driver's record."""
        data = tuple(
            v if f is None or v is None else f(v) for f, v in zip(self.results, record, strict=True)
        )
        result: IteratorResult[Any] = IteratorResult(self.columns, iter([data]))
        return result.first()


class PostgresPointReads:
    """See the module."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._compiled: dict[sa.Executable, _Compiled | None] = {}
        self._idle: list[Any] = []
        self._open = 0  # connections idle or lent
        self._loop: asyncio.AbstractEventLoop | None = None  # theirs
        self._closed = False

    def accepts(self, statement: sa.Executable) -> bool:
        """Whether ``read`` takes ``statement`` (compiled now, once)."""
        if statement in self._compiled:
            return self._compiled[statement] is not None
        if len(self._compiled) >= MAX_STATEMENTS or not isinstance(statement, sa.Select):
            return False
        compiled = statement.compile(dialect=self._engine.dialect)
        if not any(bind.required for bind in compiled.binds.values()):
            return False  # built with its values (not a constant statement): not kept
        select = cast("sa.Select[Any]", statement)
        self._compiled[statement] = _compile(select, compiled, self._engine.dialect)
        return self._compiled[statement] is not None

    async def read(
        self, statement: sa.Executable, params: Mapping[str, Any]
    ) -> tuple[bool, sa.Row[Any] | None]:
        """``(True, the first row or None)``; ``(False, None)`` when every connection of its
        own is in use (the caller reads through SQLAlchemy, whose pool waits)."""
        compiled = self._compiled[statement]
        assert compiled is not None, "read() of a statement accepts() refused"
        values = compiled.values(params)
        connection = await self._borrow()
        if connection is None:
            return False, None
        try:
            record = await connection.fetchrow(compiled.sql, *values)
        except _driver_error() as error:  # the server refused the read (a bad value...)
            self._discard(connection)
            raise StorageError(f"Database error: {_reason(error)}") from error
        except Exception:  # the connection broke (a restart, a dropped socket)  # noqa: BLE001
            self._discard(connection)
            return False, None  # SQLAlchemy's pool reconnects or reports it
        except BaseException:  # cancelled mid-exchange: the connection cannot be trusted
            self._discard(connection)
            raise
        if self._closed or connection.is_closed():
            self._discard(connection)
        else:
            self._idle.append(connection)
        return True, None if record is None else compiled.row(record)

    @property
    def connections(self) -> int:
        """How many connections of its own are open (idle or lent)."""
        return self._open

    async def close(self) -> None:
        """Close the idle connections; those lent close when they come back."""
        self._closed = True
        self._drop_idle()

    async def _borrow(self) -> Any:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._drop_idle()
            self._loop, self._open = loop, 0
        while self._idle:
            connection = self._idle.pop()
            if not connection.is_closed():
                return connection
            self._open -= 1
        if self._closed or self._open >= MAX_CONNECTIONS:
            return None
        asyncpg: Any = importlib.import_module("asyncpg")  # untyped
        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        for option in _ADAPTER_OPTIONS:  # SQLAlchemy's adapter takes these, not asyncpg
            kwargs.pop(option, None)
        self._open += 1
        try:
            return await asyncpg.connect(*args, **kwargs)
        except Exception:  # SQLAlchemy's pool connects, or reports why it cannot  # noqa: BLE001
            self._open -= 1
            return None
        except BaseException:
            self._open -= 1
            raise

    def _discard(self, connection: Any) -> None:
        self._open -= 1
        _terminate(connection)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        self._open -= len(idle)
        for connection in idle:
            _terminate(connection)


def _compile(
    statement: sa.Select[Any], compiled: SQLCompiler, dialect: sa.Dialect
) -> _Compiled | None:
    """The statement as the driver runs it, or None if some value needs more of SQLAlchemy."""
    binds = compiled.binds
    columns = list(statement.selected_columns)
    if compiled.positiontup is None or any(
        bind.expanding or bind.literal_execute for bind in binds.values()
    ):
        return None
    if not all(_plain(bind.type) for bind in binds.values()):
        return None
    if not all(_plain(column.type) for column in columns):
        return None
    keys = [key for key in map(_key, columns) if key is not None]
    if len(set(keys)) != len(columns):  # SQLAlchemy would make labels up
        return None
    names = tuple(compiled.positiontup)
    return _Compiled(
        sql=compiled.string,
        names=names,
        defaults={name: bind.value for name, bind in binds.items() if not bind.required},
        binds=tuple(binds[name].type.bind_processor(dialect) for name in names),
        results=tuple(column.type.result_processor(dialect, None) for column in columns),
        columns=SimpleResultMetaData(keys),
    )


def _key(column: Any) -> str | None:
    """A selected column's name in rows: a table column's or a label's (None otherwise)."""
    if isinstance(column, (sa.Column, sa.Label)):
        return str(column.key)
    return None


def _plain(kind: sa.types.TypeEngine[Any]) -> bool:
    """A type asyncpg reads and writes as SQLAlchemy's adapter does (JSON, arrays, enums,
    intervals and the like are decoded by codecs that adapter installs: not here)."""
    if isinstance(kind, sa.TypeDecorator):
        kind = kind.impl_instance  # its own conversions are applied (``_Compiled``)
    if isinstance(kind, sa.DateTime):
        return kind.timezone
    return isinstance(kind, _PLAIN) and not isinstance(kind, (sa.Enum, sa.Interval))


def _driver_error() -> type[BaseException]:
    return importlib.import_module("asyncpg").PostgresError


def _terminate(connection: Any) -> None:
    try:
        connection.terminate()
    except Exception:  # already gone  # noqa: BLE001
        return


def _reason(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
