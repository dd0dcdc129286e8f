"""``steps.jsonl`` read back into columns (:class:`~trainpace.series.StepSeries`), bounded.

msgspec decodes and type-checks each block of lines in C; a line that is not a step record, a
step that cannot be (an impossible number or time), a line longer than :data:`MAX_LINE_BYTES`
and a step number written twice are skipped and named, never read into the figures. The file is
opened without blocking and must be a regular file (:func:`trainpace.inputs.open_regular`).
"""

from __future__ import annotations

import math
import operator
import os
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import orjson

from trainpace.errors import RunFolderError
from trainpace.inputs import open_regular
from trainpace.series import COLUMNS, REQUIRED, StepSeries, jumps_if_increasing

if TYPE_CHECKING:  # pathlib costs 9 ms to load (urllib, ipaddress): trace analysis avoids it
    from pathlib import Path

_NAN = math.nan

BLOCK_BYTES = 1 << 20  # steps.jsonl is parsed a block at a time: ~4k lines, whatever its size
MAX_LINE_BYTES = 1 << 20  # a step record is ~0.5 kB: a line running past 1 MB is none
# What a step can be: numbers as floats hold integers exactly up to 2**53; a step time or a
# clock reading beyond ~115 days is damage, not a measurement (and it would overflow sums).
MAX_STEP = 2.0**53
MAX_TIME_S = 1e7
ROOM_MARGIN = 1.1  # the room reserved over the steps the file's size suggests (lines vary)
_BOM = b"\xef\xbb\xbf"


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
    if steps.size < 2 or jumps_if_increasing(steps) is not None:
        return  # strictly increasing, as the Meter writes them: nothing repeated
    _, first = np.unique(steps, return_index=True)
    if first.size == steps.size:
        return  # out of order, but each number once
    keep = np.zeros(steps.size, dtype=bool)
    keep[first] = True
    out.duplicates = np.unique(steps[~keep]).astype(np.int64).tolist()
    kept = StepSeries()
    kept.append_columns([(name, array("d", out.series.column(name)[keep].tobytes()))
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
    out.series.append_columns(columns, len(rows))
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
    out.series.append_rows(good, REQUIRED)
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
