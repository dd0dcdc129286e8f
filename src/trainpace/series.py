"""Step records as columns: a window's steps, the run's, and a ``steps.jsonl`` read back; the
one store the Meter, the summarizer and the run-log reader share.

``steps.jsonl`` records (:class:`trainpace.records.StepRecord`) become float64 columns, null as
NaN, so a run of millions of steps costs 8 bytes a field a step, not a Python object per step;
a column nothing filled so far (no tokens, no metric, no host-to-device copy) costs nothing.
:func:`trainpace.steps_file.read_steps` reads a ``steps.jsonl`` straight into these columns.

Memory: a column's buffer grows in place where it can; one that must move leaves its old place
free but resident (the allocator keeps it for later). So the reader reserves each column's room
once, from the file's size (:meth:`StepSeries.reserve`), and gives back what it did not use
(:meth:`StepSeries.trim`): 1e6 steps cost 8 MB a varying column, and nothing more stays behind.
"""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from trainpace.records import INTEGRAL_FIELDS, STEP_FIELDS

COLUMNS = STEP_FIELDS
REQUIRED = ("step", "t_s", "step_s")  # a record without these is not a step
CHUNK_LINES = 4096  # records turned into dicts at a time when the series is iterated
CHUNK_STEPS = 1 << 16  # steps scanned at a time (missing steps): bounds the temporaries
_ROW = operator.itemgetter(*COLUMNS)
_NAN = math.nan


class _Invalid(Exception):  # noqa: N818 (internal control flow, never raised to a user)
    """Rows hold a value that is not a number or null (or a required one is null)."""


class StepSeries:
    """``steps.jsonl`` records as float64 columns; null is NaN. Appending is amortized O(1).

    Iterated or indexed it gives the records again (a dict per step, built on demand): fine
    for a few thousand steps; long runs use :meth:`column`. It is deliberately not a
    ``Sequence``: a consumer that takes columns or records tells them apart by that.
    """

    def __init__(self) -> None:
        # A float: every value so far is that one (NaN: null), so a column that never
        # changes (no tokens; samples, micro_batches of a fixed batch) costs nothing; it
        # becomes an array on its first different value.
        # An array may be longer than the series (room reserved): its first len(self) values
        # are the column's.
        self._columns: dict[str, array[float] | float] = dict.fromkeys(COLUMNS, _NAN)
        self._n = 0
        self._room = 0  # the length a column gets when it becomes an array (reserve)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> StepSeries:
        series = cls()
        series.extend(records)
        return series

    def extend(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append records (each a mapping; a key it lacks is null).

        Raises TypeError when a value is neither a number nor null.
        """
        records = list(records)
        try:
            rows = list(map(_ROW, records))  # each record's values in COLUMNS order, in C
        except KeyError:  # a record from elsewhere without every key
            rows = [tuple(record.get(name) for name in COLUMNS) for record in records]
        try:
            self.append_rows(rows, required=())
        except _Invalid as exc:
            raise TypeError(str(exc)) from None

    @classmethod
    def from_columns(cls, columns: Sequence[Sequence[Any]]) -> StepSeries:
        """The steps of ``columns``: one sequence of values (numbers or None) per field, in
        COLUMNS order (the Meter's writer gathers a window's that way). Raises TypeError when
        a value is neither a number nor null."""
        series = cls()
        try:
            series.append_values(columns, len(columns[0]), required=())
        except _Invalid as exc:
            raise TypeError(str(exc)) from None
        return series

    def append_rows(self, rows: list[tuple[Any, ...]], required: Sequence[str]) -> None:
        """Append rows of values in COLUMNS order, all or nothing; _Invalid when a value is
        not a number or null (or a ``required`` one is null)."""
        if rows:
            self.append_values(list(zip(*rows, strict=True)), len(rows), required)

    def append_values(self, columns: Sequence[Sequence[Any]], n: int,
                      required: Sequence[str]) -> None:
        """Append ``n`` steps given as one sequence of values per field, in COLUMNS order, all
        or nothing; _Invalid when a value is not a number or null (or a ``required`` one is
        null)."""
        if not n:
            return
        staged: list[tuple[str, array[float] | float | None]] = []
        for name, values in zip(COLUMNS, columns, strict=True):
            try:
                staged.append((name, array("d", values)))  # all numbers: one pass, in C
                continue
            except TypeError:  # nulls, or a value that is no number
                pass
            missing = values.count(None)
            if missing and name in required:
                raise _Invalid(f"{name} is null")
            if missing == n:
                staged.append((name, None))
                continue
            try:
                staged.append((name, array("d", [_NAN if v is None else v for v in values])))
            except TypeError:
                raise _Invalid(name) from None
        self.append_columns(staged, n)

    def reserve(self, steps: int) -> None:
        """Make room for ``steps`` steps in each column, so that appending up to that many
        never moves a column's buffer (a column of one value still costs nothing)."""
        self._room = max(self._room, steps)
        for column in self._columns.values():
            if isinstance(column, array) and len(column) < steps:
                column.extend(array("d", [_NAN]) * (steps - len(column)))

    def trim(self) -> None:
        """Give back the room reserved beyond the steps held."""
        self._room = 0
        for column in self._columns.values():
            if isinstance(column, array) and len(column) > self._n:
                del column[self._n:]

    def append(self, steps: StepSeries) -> None:
        """Append the steps of another series (a window's, to the run's)."""
        if steps._n:
            n = steps._n
            self.append_columns([(name, column if isinstance(column, float) else column[:n])
                                  for name, column in steps._columns.items()], n)

    def append_columns(self, columns: Sequence[tuple[str, array[float] | float | None]],
                        n: int) -> None:
        """Append ``n`` steps given as one array per column, or one float for all of them
        (None: all null), in COLUMNS order."""
        at = self._n
        for name, new in columns:
            column = self._columns[name]
            if new is None:
                new = _NAN
            if isinstance(column, float):
                value = new if isinstance(new, float) else _constant(new)
                if value is not None and (at == 0 or _same(value, column)):
                    self._columns[name] = value  # still one value throughout
                    continue
                column = self._columns[name] = array("d", [column]) * max(at, self._room)
            values = array("d", [new]) * n if isinstance(new, float) else new
            room = len(column) - at
            if room >= n:
                column[at:at + n] = values
            elif room > 0:
                column[at:] = values[:room]
                column.extend(values[room:])
            else:
                column.extend(values)
        self._n += n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(self._n))]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("step index out of range")
        return self._record(index)

    def _record(self, i: int) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for name, column in self._columns.items():
            value = column if isinstance(column, float) else column[i]
            if math.isnan(value):
                record[name] = None
            elif name in INTEGRAL_FIELDS:
                record[name] = int(value)
            elif name == "loss_nonfinite":
                record[name] = bool(value)
            else:
                record[name] = value
        return record

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # A chunk of rows at a time: its columns become Python lists (None for NaN) in C,
        # and each record is one dict(zip(...)); no list of the whole run is ever built.
        for lo in range(0, self._n, CHUNK_LINES):
            hi = min(lo + CHUNK_LINES, self._n)
            columns = [self._python_values(name, lo, hi) for name in COLUMNS]
            yield from map(dict, map(zip, itertools.repeat(COLUMNS), zip(*columns, strict=True)))

    def _python_values(self, name: str, lo: int, hi: int) -> list[Any]:
        values = self.column(name)[lo:hi]
        nan = np.isnan(values)
        if name in INTEGRAL_FIELDS:
            out: list[Any] = values.astype(np.int64).tolist() if not nan.any() else [
                None if m else int(v) for v, m in zip(values.tolist(), nan.tolist(), strict=True)]
        elif name == "loss_nonfinite":
            out = [None if m else bool(v) for v, m in zip(values.tolist(), nan.tolist(),
                                                          strict=True)]
        else:
            out = values.tolist()
            if nan.any():
                for i in np.flatnonzero(nan).tolist():
                    out[i] = None
        return out

    def records(self) -> list[dict[str, Any]]:
        """The steps as ``steps.jsonl`` records again (null for NaN)."""
        return list(self)

    def column(self, name: str) -> np.ndarray:
        """A read-only view of one column (no copy; a column of one value is a broadcast view
        of it, no memory)."""
        if name not in self._columns:
            raise KeyError(f"no step column {name!r}; the columns are {', '.join(COLUMNS)}")
        column = self._columns[name]
        if isinstance(column, float):
            return np.broadcast_to(np.float64(column), (self._n,))
        if not self._n:
            return np.empty(0)
        view = np.frombuffer(column, dtype=np.float64, count=self._n)
        view.flags.writeable = False
        return view

    def null(self, name: str) -> bool:
        """True when every value of the column is null (a column that never had one), told
        without making a view of it."""
        column = self._columns[name]
        return isinstance(column, float) and math.isnan(column)

    def missing_steps(self) -> list[tuple[int, int]]:
        """Gaps in the step numbers: ``(first, last)`` ranges of steps absent from the
        records (before the first record and between records), in order."""
        steps = self.column("step")
        if not steps.size:
            return []
        jumps = jumps_if_increasing(steps)
        ordered = steps
        if jumps is None:  # out of order or repeated: sorted, duplicates once (a copy)
            ordered = np.unique(steps)
            jumps = np.flatnonzero(np.diff(ordered) > 1)
        gaps: list[tuple[int, int]] = []
        if ordered[0] > 1:
            gaps.append((1, int(ordered[0]) - 1))
        gaps += [(int(ordered[i]) + 1, int(ordered[i + 1]) - 1) for i in jumps]
        return gaps

    def nbytes(self) -> int:
        """Bytes the columns hold."""
        return sum(c.itemsize * len(c) for c in self._columns.values() if isinstance(c, array))


def jumps_if_increasing(steps: np.ndarray) -> np.ndarray | None:
    """The positions i where ``steps[i + 1] - steps[i] > 1`` when the steps strictly
    increase (as the Meter writes them: no sort, no copy needed), a chunk at a time; None
    when they do not."""
    jumps = []
    for lo in range(0, steps.size - 1, CHUNK_STEPS):
        step = np.diff(steps[lo:lo + CHUNK_STEPS + 1])
        if not bool((step > 0).all()):  # NaN compares False: the sorting path
            return None
        jumps.append(np.flatnonzero(step > 1) + lo)
    return np.concatenate(jumps) if jumps else np.empty(0, dtype=np.int64)


def _constant(values: array[float]) -> float | None:
    """The one value of ``values`` when they are all the same (NaN included), else None."""
    if not values:
        return None
    a = np.frombuffer(values, dtype=np.float64)
    first = float(a[0])
    same = np.isnan(a).all() if math.isnan(first) else (a == first).all()
    return first if bool(same) else None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


