"""A FAKE python-oracledb connection, for tests only.

No Oracle database can run on the machines this project is built and tested on, so the SQL and
CALIBRATE_IO adapters are tested against this stand-in. It implements only the slice of the
python-oracledb Connection/Cursor interface the adapters use -- ``cursor()``, ``execute``, ``fetchall``,
``description``, ``var``, ``callproc`` with OUT variables, ``call_timeout`` and ``close`` -- and answers
from canned tables matched by a fragment of the SQL text. It proves the adapters' plumbing (statements,
column mapping, OUT parameters, timeouts, error paths), not Oracle's behaviour: the live path is exercised
only in a lab that declares a database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Procedure = Callable[[Sequence[Any]], Sequence[Any]]


@dataclass
class FakeResult:
    """Canned answer to a query: column names and row tuples."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]] = ()


@dataclass
class FakeVar:
    """Stand-in for the variable ``cursor.var(...)`` returns (an OUT bind)."""

    type: Any
    value: Any = None

    def getvalue(self, pos: int = 0) -> Any:
        """The value the procedure wrote."""
        return self.value

    def setvalue(self, pos: int, value: Any) -> None:
        """Set the value (as a procedure would)."""
        self.value = value


class FakeCursor:
    """A cursor over :class:`FakeConnection`'s canned results."""

    def __init__(self, connection: FakeConnection) -> None:
        self._connection = connection
        self.description: list[tuple[str, ...]] | None = None
        self._rows: list[tuple[Any, ...]] = []
        self.closed = False

    def execute(self, statement: str, parameters: Any = None) -> None:
        """Answer ``statement`` from the first canned result whose fragment it contains."""
        self._connection.executed.append(" ".join(statement.split()))
        self._connection.binds.append(dict(parameters or {}))
        answer = self._connection.answer(statement)
        if isinstance(answer, BaseException):
            raise answer
        self.description = [(name.upper(),) for name in answer.columns]
        self._rows = [tuple(row) for row in answer.rows]

    def fetchall(self) -> list[tuple[Any, ...]]:
        """All remaining rows."""
        rows, self._rows = self._rows, []
        return rows

    def var(self, typ: Any) -> FakeVar:
        """An OUT variable."""
        return FakeVar(typ)

    def callproc(self, name: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """Call a canned procedure: it receives the IN values and returns one value per OUT variable."""
        inputs = [p for p in parameters if not isinstance(p, FakeVar)]
        self._connection.calls.append((name.upper(), tuple(inputs), self._connection.call_timeout))
        procedure = self._connection.procedures.get(name.upper())
        if procedure is None:
            raise LookupError(f"fake connection has no procedure {name}")
        outputs = list(procedure(inputs))
        out_vars = [p for p in parameters if isinstance(p, FakeVar)]
        if len(outputs) != len(out_vars):
            raise ValueError(f"fake {name} returned {len(outputs)} values for {len(out_vars)} OUT variables")
        for var, value in zip(out_vars, outputs, strict=True):
            var.setvalue(0, value)
        return [p.getvalue() if isinstance(p, FakeVar) else p for p in parameters]

    def close(self) -> None:
        """Mark the cursor closed."""
        self.closed = True


@dataclass
class FakeConnection:
    """A fake connection: ``tables`` maps an SQL fragment to a result (or an exception to raise)."""

    tables: Mapping[str, FakeResult | BaseException] = field(default_factory=dict)
    procedures: Mapping[str, Procedure] = field(default_factory=dict)
    call_timeout: int = 0
    closed: bool = False
    executed: list[str] = field(default_factory=list)
    binds: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, tuple[Any, ...], int]] = field(default_factory=list)

    def answer(self, statement: str) -> FakeResult | BaseException:
        """The canned result for ``statement`` (fragments match case-insensitively, longest first)."""
        text = " ".join(statement.split()).upper()
        for fragment in sorted(self.tables, key=len, reverse=True):
            if " ".join(fragment.split()).upper() in text:
                return self.tables[fragment]
        raise LookupError(f"fake connection has no answer for: {statement}")

    def cursor(self) -> FakeCursor:
        """A new cursor."""
        if self.closed:
            raise RuntimeError("fake connection is closed")
        return FakeCursor(self)

    def close(self) -> None:
        """Close the connection."""
        self.closed = True
