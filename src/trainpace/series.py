"""Step records as columns: the store the Meter, the summarizer and the run-log reader share.

``steps.jsonl`` records (:class:`trainpace.records.StepRecord`) become float64 columns, null as
NaN, so a run of millions of steps costs 8 bytes a field a step, not a Python object per step.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from trainpace.records import INTEGRAL_FIELDS, STEP_FIELDS

COLUMNS = STEP_FIELDS
_ROW = operator.itemgetter(*COLUMNS)


class StepSeries:
    """``steps.jsonl`` records as float64 columns; null is NaN. Appending is amortized O(1)."""

    def __init__(self) -> None:
        self._columns = {name: array("d") for name in COLUMNS}

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> StepSeries:
        series = cls()
        series.extend(records)
        return series

    def extend(self, records: Iterable[Mapping[str, Any]]) -> None:
        records = list(records)
        nan = math.nan
        try:
            rows = list(map(_ROW, records))  # each record's values in COLUMNS order, in C
        except KeyError:  # a record from elsewhere without every key
            rows = [tuple(record.get(name) for name in COLUMNS) for record in records]
        # no rows: zip(*rows) is empty and nothing is added
        for column, values in zip(self._columns.values(), zip(*rows, strict=True), strict=False):
            missing = values.count(None)
            if missing == len(values):  # a column nothing filled (no tokens, no metric...)
                column.extend([nan] * missing)
            elif missing:
                column.extend([nan if value is None else value for value in values])
            else:
                column.extend(values)

    def __len__(self) -> int:
        return len(self._columns["step"])

    def records(self) -> list[dict[str, Any]]:
        """The steps as ``steps.jsonl`` records again (null for NaN)."""
        columns = {name: self._columns[name] for name in COLUMNS}
        integral = INTEGRAL_FIELDS
        out: list[dict[str, Any]] = []
        for i in range(len(self)):
            record: dict[str, Any] = {}
            for name, column in columns.items():
                value = column[i]
                if math.isnan(value):
                    record[name] = None
                else:
                    record[name] = int(value) if name in integral else value
            out.append(record)
        return out

    def column(self, name: str) -> np.ndarray:
        """A read-only view of one column (no copy)."""
        column = self._columns[name]
        if not column:
            return np.empty(0)
        view = np.frombuffer(column, dtype=np.float64)
        view.flags.writeable = False
        return view


