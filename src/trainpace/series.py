"""Step records as columns: a window's steps, the run's, and a ``steps.jsonl`` read back; the
one store the Meter, the summarizer and the run-log reader share.

``steps.jsonl`` records (:class:`trainpace.records.StepRecord`) become float64 columns, null as
NaN, so a run of millions of steps costs 8 bytes a field a step, not a Python object per step;
a column nothing filled so far (no tokens, no metric, no host-to-device copy) costs nothing.
:func:`read_steps` reads a ``steps.jsonl`` straight into columns (msgspec decodes and type-checks
each block of lines in C), skipping (and naming) lines that are not step records.

Memory: a column's buffer grows in place where it can; one that must move leaves its old place
free but resident (the allocator keeps it for later). So the reader reserves each column's room
once, from the file's size (:meth:`StepSeries.reserve`), and gives back what it did not use
(:meth:`StepSeries.trim`): 1e6 steps cost 8 MB a varying column, and nothing more stays behind.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import msgspec
import numpy as np
import orjson

from trainpace.errors import RunFolderError
from trainpace.inputs import open_regular
from trainpace.records import INTEGRAL_FIELDS, STEP_FIELDS

if TYPE_CHECKING:  # pathlib costs 9 ms to load (urllib, ipaddress): trace analysis avoids it
    from pathlib import Path

COLUMNS = STEP_FIELDS
REQUIRED = ("step", "t_s", "step_s")  # a record without these is not a step
CHUNK_LINES = 4096  # records turned into dicts at a time when the series is iterated
BLOCK_BYTES = 1 << 20  # steps.jsonl is parsed a block at a time: ~4k lines, whatever its size
CHUNK_STEPS = 1 << 16  # steps scanned at a time (missing steps): bounds the temporaries
MAX_LINE_BYTES = 1 << 20  # a step record is ~0.5 kB: a line running past 1 MB is none
# What a step can be: numbers as floats hold integers exactly up to 2**53; a step time or a
# clock reading beyond ~115 days is damage, not a measurement (and it would overflow sums).
MAX_STEP = 2.0**53
MAX_TIME_S = 1e7
ROOM_MARGIN = 1.1  # the room reserved over the steps the file's size suggests (lines vary)
_ROW = operator.itemgetter(*COLUMNS)
_NAN = math.nan
_BOM = b"\xef\xbb\xbf"


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
            self._append_rows(rows, required=())
        except _Invalid as exc:
            raise TypeError(str(exc)) from None

    def _append_rows(self, rows: list[tuple[Any, ...]], required: Sequence[str]) -> None:
        """Append rows of values in COLUMNS order, all or nothing; _Invalid when a value is
        not a number or null (or a ``required`` one is null)."""
        if not rows:
            return
        n = len(rows)
        staged: list[tuple[str, array[float] | float | None]] = []
        for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True):
            missing = values.count(None)
            if missing == n:
                if name in required:
                    raise _Invalid(f"{name} is null")
                staged.append((name, None))
                continue
            if missing and name in required:
                raise _Invalid(f"{name} is null")
            first = values[0]
            if not missing and values.count(first) == n and isinstance(first, (int, float)):
                staged.append((name, float(first)))  # one value throughout: no array
                continue
            try:
                staged.append((name, array("d", [_NAN if v is None else v for v in values]
                                         if missing else values)))
            except TypeError:
                raise _Invalid(name) from None
        self._append_columns(staged, n)

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
            self._append_columns([(name, column if isinstance(column, float) else column[:n])
                                  for name, column in steps._columns.items()], n)

    def _append_columns(self, columns: Sequence[tuple[str, array[float] | float | None]],
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
        jumps = _jumps_if_increasing(steps)
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


def _jumps_if_increasing(steps: np.ndarray) -> np.ndarray | None:
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


@dataclass
class StepsFile:
    """A ``steps.jsonl`` read into columns, and what had to be left out."""

    series: StepSeries
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)
    truncated: bool = False  # the last line was cut off (a run killed mid-write)
    duplicates: list[int] = field(default_factory=list)  # step numbers written more than once


def _row_type() -> type[msgspec.Struct]:
    """The typed line msgspec decodes in C: the required fields numbers, the others numbers
    or null (missing: null), ``loss_nonfinite`` a bool; unknown keys ignored."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (name, float) if name in REQUIRED
        else (name, bool | None, None) if name == "loss_nonfinite"
        else (name, float | None, None)
        for name in COLUMNS
    ]
    return msgspec.defstruct("StepLine", fields, gc=False)


_DECODER = msgspec.json.Decoder(_row_type())
_GETTERS = tuple((name, operator.attrgetter(name)) for name in COLUMNS)


def read_steps(path: Path) -> StepsFile:
    """Read ``steps.jsonl`` at ``path`` into columns, a block of :data:`BLOCK_BYTES` at a time.

    A line that is not a JSON object, that holds a value that is not a number or null (or no
    ``step``, ``t_s`` or ``step_s``), whose times are impossible (:func:`_impossible`), or that
    runs past :data:`MAX_LINE_BYTES` without ending, is skipped and listed in ``bad_lines``; a
    last line that does not parse is a cut-off write (``truncated``), not a bad line. A step
    number written more than once keeps its first record (the others are listed in
    ``duplicates``). Raises RunFolderError when the file cannot be read or is not a regular
    file (a FIFO, a device, a link to one).
    """
    out = StepsFile(StepSeries())
    last_good = 0
    number = 1  # the line number of the block's first line
    with open_regular(path, RunFolderError) as stream:
        size = os.fstat(stream.fileno()).st_size
        rest = b""  # the start of a line whose end has not been read yet
        skipping = False  # inside a line too long to be a step: dropped up to its end
        while True:
            block = stream.read(BLOCK_BYTES)
            if number == 1 and not rest and block.startswith(_BOM):
                block = block[len(_BOM):]  # an editor's UTF-8 byte-order mark: not data
            if not block:
                block, rest = rest, b""
                if not block:
                    break
            else:
                if skipping:
                    end = block.find(b"\n")
                    if end < 0:
                        continue
                    skipping, number, block = False, number + 1, block[end + 1:]
                cut = block.rfind(b"\n") + 1
                if cut == 0:  # no line end in this block
                    if len(rest) + len(block) > MAX_LINE_BYTES:
                        out.bad_lines.append((number, f"longer than {MAX_LINE_BYTES:,} bytes"))
                        rest, skipping = b"", True
                    else:
                        rest += block  # at most MAX_LINE_BYTES: copies stay linear
                    continue
                block, rest = rest + block[:cut], block[cut:]
            lines = block.count(b"\n")
            if not len(out.series) and lines:  # the room for the whole file, from its first lines
                out.series.reserve(int(ROOM_MARGIN * lines * size / len(block)) + 1)
            kept = _block(out, block, number, lines)
            if kept:
                last_good = kept
            number += lines
    if out.bad_lines and out.bad_lines[-1][0] > last_good and out.bad_lines[-1][1].startswith(
            "not a JSON line"):
        out.bad_lines.pop()  # the last line, cut off by a killed writer
        out.truncated = True
    out.series.trim()
    _drop_repeated_steps(out)
    return out


def _drop_repeated_steps(out: StepsFile) -> None:
    """Keep the first record of each step number (a step counted twice would count its time
    twice: measured time above the wall time); the repeated numbers go to ``duplicates``."""
    steps = out.series.column("step")
    if steps.size < 2 or _jumps_if_increasing(steps) is not None:
        return  # strictly increasing, as the Meter writes them: nothing repeated
    _, first = np.unique(steps, return_index=True)
    if first.size == steps.size:
        return  # out of order, but each number once
    keep = np.zeros(steps.size, dtype=bool)
    keep[first] = True
    out.duplicates = np.unique(steps[~keep]).astype(np.int64).tolist()
    kept = StepSeries()
    kept._append_columns([(name, array("d", out.series.column(name)[keep].tobytes()))
                          for name in COLUMNS], int(first.size))
    out.series = kept


def _impossible(step: Any, t_s: Any, step_s: Any) -> Any:
    """Where the required values cannot be a step's (arrays or numbers): a step number that
    is not a whole number from 1 to :data:`MAX_STEP`, a time or duration that is negative,
    not finite or beyond :data:`MAX_TIME_S`. NaN fails every comparison: impossible too."""
    ok = ((step >= 1) & (step <= MAX_STEP) & (np.floor(step) == step)
          & (t_s >= 0) & (t_s <= MAX_TIME_S) & (step_s >= 0) & (step_s <= MAX_TIME_S))
    return np.logical_not(ok)  # a bool array, or a numpy bool for numbers


def _block(out: StepsFile, block: bytes, first: int, lines: int) -> int:
    """Parse and append one block of ``lines`` whole lines; returns the line number of its
    last good record (0: none; a blank line after it may count as good: harmless)."""
    try:
        rows = _DECODER.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _block_by_line(out, block, first)
    if not rows:
        return 0
    columns: list[tuple[str, array[float] | None]] = []
    for name, get in _GETTERS:
        try:
            columns.append((name, array("d", map(get, rows))))
        except TypeError:  # nulls (a bool column is fine: array takes bools)
            values = list(map(get, rows))
            if values.count(None) == len(values):
                columns.append((name, None))
            else:
                columns.append((name, array("d", [_NAN if v is None else v for v in values])))
    required = [np.frombuffer(c, dtype=np.float64) for n, c in columns if n in REQUIRED
                and c is not None]
    if bool(np.any(_impossible(*required))):
        return _block_by_line(out, block, first)  # which lines: named one by one
    out.series._append_columns(columns, len(rows))
    return first + max(lines, 1) - 1


def _block_by_line(out: StepsFile, block: bytes, first: int) -> int:
    """The slow path for a block with something off: each line on its own, the bad ones
    named."""
    good: list[tuple[Any, ...]] = []
    last = 0
    for number, line in enumerate(block.split(b"\n"), start=first):
        if not line.strip():
            continue
        row, why = _row(line)
        if row is None:
            out.bad_lines.append((number, why))
        else:
            good.append(row)
            last = number
    out.series._append_rows(good, REQUIRED)
    return last


def _row(line: bytes) -> tuple[tuple[Any, ...] | None, str]:
    """One line's values in COLUMNS order, or (None, why it is not a step record)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return None, f"not a JSON line ({exc})"
    if not isinstance(record, dict):
        return None, f"a JSON {type(record).__name__}, not an object"
    values = tuple(record.get(name) for name in COLUMNS)
    for name, value in zip(COLUMNS, values, strict=True):
        if value is None:
            if name in REQUIRED:
                return None, f"{name} is missing or null"
        elif not isinstance(value, (int, float)) or (isinstance(value, bool)
                                                     and name != "loss_nonfinite"):
            return None, f"{name} is {_short(value)}, not a number"
    try:
        step, t_s, step_s = (float(record[name]) for name in REQUIRED)
    except OverflowError:  # an integer beyond any float
        step = t_s = step_s = _NAN
    if _impossible(step, t_s, 0.0):
        if _impossible(step, 0.0, 0.0):
            return None, f"step {_short(record['step'])} is not a whole number from 1 to 2**53"
        return None, f"t_s {_short(record['t_s'])} is not a time from 0 to {MAX_TIME_S:.0e} s"
    if _impossible(1.0, 0.0, step_s):
        return None, (f"step_s {_short(record['step_s'])} is not a duration from 0 to "
                      f"{MAX_TIME_S:.0e} s")
    return values, ""


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:39] + "…"
