"""A run of consecutive steps as columns: what a window hands to the column store and to the
window figures, so that neither walks a dict per step.

Each field is either an ``array('d')`` of one value per step or one float for a field that has
that value at every step (NaN: null throughout), the column store's own layout
(:class:`trainpace.series.StepSeries`). The Meter's recorder builds them while it makes a
window's records, on the training thread, where the step values are still in the CPU's caches;
the writer thread then appends them and computes the window's figures from contiguous numbers
(reading a dict per step that another core just made costs it several times more).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_type_hints

import msgspec

from trainpace.records import STEP_FIELDS, StepRecord

COLUMNS = STEP_FIELDS
NAN = math.nan


class StepColumns:
    """``n`` steps as columns: ``values[name]`` is an array of ``n`` floats, or one float for
    all of them (NaN: null). Made with every field of :data:`COLUMNS`."""

    __slots__ = ("n", "values")

    def __init__(self, n: int, values: dict[str, array[float] | float]) -> None:
        self.n = n
        self.values = values

    def column(self, name: str) -> Sequence[float]:
        """The field's values, one per step (a list for a field of one value)."""
        value = self.values[name]
        return [value] * self.n if isinstance(value, float) else value

    def is_null(self, name: str) -> bool:
        """True when the field is null at every step."""
        value = self.values[name]
        return isinstance(value, float) and math.isnan(value)

    @classmethod
    def concat(cls, parts: Sequence[StepColumns]) -> StepColumns:
        """The steps of ``parts`` one after the other, in one set of columns."""
        if len(parts) == 1:
            return parts[0]
        n = sum(part.n for part in parts)
        values: dict[str, array[float] | float] = {}
        for name in COLUMNS:
            pieces = [part.values[name] for part in parts if part.n]
            first = pieces[0] if pieces else NAN
            if isinstance(first, float) and all(isinstance(p, float) and _same(p, first)
                                                for p in pieces):
                values[name] = first
                continue
            joined = array("d")
            for part in parts:
                if part.n:
                    piece = part.values[name]
                    joined.extend(array("d", [piece]) * part.n if isinstance(piece, float)
                                  else piece)
            values[name] = joined
        return cls(n, values)


StepLine: type[msgspec.Struct] = msgspec.defstruct(
    "StepLine", list(get_type_hints(StepRecord).items()), gc=False, module=__name__)
"""One ``steps.jsonl`` line as the recorder makes it: a struct with the fields of
:class:`~trainpace.records.StepRecord`, in file order (made from it: the schema is written
once). Made and encoded several times faster than a dict; the dict is made only for whoever
reads it."""


class StepBatch:
    """A window's steps three ways: the lines to write (:class:`StepLine`, or the records
    themselves), the same steps as columns, and as records (dicts, made on first use: most
    windows never need them)."""

    __slots__ = ("_records", "columns", "lines")

    def __init__(self, lines: Sequence[msgspec.Struct] | Sequence[StepRecord], columns: StepColumns,
                 records: list[StepRecord] | None = None) -> None:
        self.lines = lines
        self.columns = columns
        self._records = records

    @classmethod
    def of(cls, records: list[StepRecord]) -> StepBatch:
        return cls(records, columns_of(records), records)

    @classmethod
    def empty(cls) -> StepBatch:
        return cls.of([])

    @property
    def records(self) -> list[StepRecord]:
        if self._records is None:
            self._records = [_record(line) for line in self.lines]
        return self._records

    def __len__(self) -> int:
        return self.columns.n

    def last_step(self) -> int:
        return int(self.columns.column("step")[-1])


def _record(line: msgspec.Struct | StepRecord) -> StepRecord:
    if isinstance(line, msgspec.Struct):
        return msgspec.structs.asdict(line)  # type: ignore[return-value]  # the same fields
    return line


def columns_of(records: Iterable[Mapping[str, Any]]) -> StepColumns:
    """Records as columns (a key a record lacks is null). Raises TypeError when a value is
    neither a number nor null."""
    records = list(records)
    n = len(records)
    values: dict[str, array[float] | float] = {}
    for name in COLUMNS:
        column: list[Any] = [record.get(name) for record in records]
        missing = column.count(None)
        if missing == n:
            values[name] = NAN
            continue
        try:
            values[name] = array("d", [NAN if v is None else v for v in column]
                                 if missing else column)
        except TypeError:
            raise TypeError(f"{name} holds a value that is not a number or null") from None
    return StepColumns(n, values)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
