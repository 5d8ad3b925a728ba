"""What every kind of the view's rows shares: a batch's writes made ready
before its transaction begins (:class:`Plan`), run on the driver's cursor
many rows a statement (:func:`bulk`), and values that bind cheaply."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any

from sqlalchemy import Connection, Executable


class Plan:
    """A batch's writes, in order, made ready before its transaction begins."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps: list[tuple[Any, Any]] = []

    def bulk(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``sql`` with ``?`` placeholders, once per row (see :func:`bulk`)."""
        if rows:
            self.steps.append((sql, rows))

    def execute(self, statement: Executable, parameters: Any = None) -> None:
        """A SQLAlchemy statement, for the rare changes (providers reshaped,
        pools defined, dead letters)."""
        self.steps.append((statement, parameters))

    def run(self, conn: Connection) -> None:
        for what, parameters in self.steps:
            if isinstance(what, str):
                bulk(conn, what, parameters)
            else:
                conn.execute(what, parameters)


def bulk(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """executemany straight on the driver's cursor: the hot path writes up to
    millions of rows per replay, and SQLAlchemy's per-row parameter processing
    costs more than the database does. ``sql`` uses ``?`` placeholders.

    An INSERT goes as statements of many rows each: the database then prepares,
    steps and resets a statement per group of rows rather than per row, which
    cuts SQLite's cost per inserted row by about a third."""
    if not rows:
        return
    qmark = conn.dialect.paramstyle == "qmark"
    width = len(rows[0])
    per = _PARAMETERS_PER_STATEMENT // width
    full = len(rows) // per * per if sql.startswith("INSERT") else 0
    cursor = conn.connection.cursor()
    try:
        if full:
            flat = list(chain.from_iterable(rows))
            step = per * width
            cursor.executemany(
                _multi_row(sql, per, qmark),
                [flat[i : i + step] for i in range(0, full * width, step)],
            )
            rows = rows[full:]
        if rows:
            cursor.executemany(sql if qmark else sql.replace("?", "%s"), rows)
    finally:
        cursor.close()


_PARAMETERS_PER_STATEMENT = 900
"""Under 999, the most parameters a statement may have on old SQLite builds."""

_MULTI_ROW: dict[tuple[str, int, bool], str] = {}


def _multi_row(sql: str, rows: int, qmark: bool) -> str:
    """``sql``, an ``INSERT ... VALUES (?, ...)``, inserting ``rows`` rows at once."""
    key = (sql, rows, qmark)
    statement = _MULTI_ROW.get(key)
    if statement is None:
        head, _, values = sql.rpartition(" VALUES ")
        statement = f"{head} VALUES {', '.join([values] * rows)}"
        if not qmark:
            statement = statement.replace("?", "%s")
        statement = _MULTI_ROW[key] = statement
    return statement


# The sqlite3 module binds None through its adapter lookup, which costs as
# much as three other values: a column the hot rows leave empty is a NULL in
# the statement, or a sentinel the statement turns into NULL (no expiry is -1,
# no anti-affinity group is ""; neither is a valid value).
NO_EXPIRY = -1

compact_json = json.JSONEncoder(separators=(",", ":")).encode
"""JSON without spaces, as the view's JSON columns hold it."""


def chunks(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
