"""Read a Kineto (``torch.profiler``) Chrome trace into columns: one numpy array per field.

The file is streamed in pieces of whole events (:mod:`.stream`); each piece's complete
(``"ph": "X"``) events become typed numpy arrays, a field at a time, and the piece is
dropped. Memory is the columns (about 60 bytes an event) plus one piece, not the whole
document as Python objects.
Everything wrong with the input becomes a :class:`TraceFormatError` naming the file; a bad
event is counted and skipped, and the analysis says how many.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from itertools import chain, compress, count
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from trainpace.errors import TraceFormatError
from trainpace.trace.memory import CHUNK_BYTES, check_memory
from trainpace.trace.source import Source
from trainpace.trace.stream import EVENTS, Event, Stream

# Times a profiler can write, in µs: a timestamp within ~300 years of its clock's origin (the
# epoch, or boot), a span under ~11 days. Beyond them a value is damage, not a measurement,
# and it would overflow the sums and differences of the analysis.
MAX_TS_US = 1e16
MAX_DUR_US = 1e12
OUT_OF_RANGE = "malformed: ts or dur negative, infinite or out of range"


class TraceColumns(msgspec.Struct, frozen=True):  # built in C: no import-time cost
    """The complete events of one trace, as columns. Times are µs, as in the file.

    ``name`` and ``cat`` are indices into ``names`` and ``cats``;
    ``stream``, ``correlation``, ``external_id`` and ``device`` are -1 where the event has none;
    ``thread`` is the tid (a negative number stands for a tid written as a string).
    When the trace has fractional (ns-resolution) timestamps, starts are rounded up and ends
    down to whole µs, as Holistic Trace Analysis does, so back-to-back kernels do not overlap.
    """

    path: str
    meta: dict[str, Any]
    names: tuple[str, ...]
    cats: tuple[str, ...]
    name: np.ndarray
    cat: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    device: np.ndarray
    thread: np.ndarray
    events_total: int = 0
    skipped: dict[str, int] = msgspec.field(default_factory=dict)
    rounded_to_us: bool = False

    def __len__(self) -> int:
        return len(self.ts)


def load_trace(
    path: str | os.PathLike[str],
    *,
    chunk_bytes: int = CHUNK_BYTES,
    memory_available: int | None = None,
) -> TraceColumns:
    """Read one trace file (``.json`` or gzip, by content) into :class:`TraceColumns`.

    ``memory_available`` (bytes) defaults to what the system has free; a trace that would not
    fit is refused before reading, with the sizes in the message.
    """
    name = os.fspath(path)
    check_memory(name, memory_available)
    return read_trace(name, chunk_bytes=chunk_bytes)


def read_trace(name: str, *, chunk_bytes: int = CHUNK_BYTES) -> TraceColumns:
    """:func:`load_trace` without the memory check (done once, before): the file is opened
    and read once, so a FIFO works."""
    columns = _Columns()
    try:
        with Source(name) as source:
            meta = Stream(source, name, chunk_bytes, columns).run()
    except MemoryError as exc:
        raise TraceFormatError(
            f"{name}: ran out of memory while reading it; analyze it on a machine with more "
            "memory or record fewer steps (torch.profiler.schedule(active=...))"
        ) from exc
    loaded = columns.finish(name, meta)
    if not len(loaded):
        raise TraceFormatError(
            f"{name}: no complete ('ph': 'X') events with a category among its "
            f"{loaded.events_total} events: not a profiler trace, or an empty one"
        )
    return loaded


# ---- columns --------------------------------------------------------------------------------


def _as_int(value: Any) -> int:
    """An id or stream number, as HTA reads it (int() of it), or -1."""
    if isinstance(value, bool) or value is None:
        return -1
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return -1
    return number if -(2**63) <= number < 2**63 else -1


def _number(value: Any) -> float | None:
    """A finite time in µs, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


# A decoded piece is read field by field: each field of every event at once, through C-level
# iteration (map over attrgetter) into numpy, so no Python code runs per event.
_TS, _DUR, _ARGS = (attrgetter(f) for f in ("ts", "dur", "args"))
_KEY = attrgetter("cat", "name", "tid")
_Key = tuple[Any, Any, Any]
# The ids of an event's args as one tuple made in C: astuple reads the struct's slots in their
# order, EventArgs' field order (tested), in 0.6x the time of an attrgetter of the five names.
_ID_FIELDS = ("stream", "correlation", "external_id", "external_id_old", "device")
_ARG_IDS = msgspec.structs.astuple
_N_IDS = len(_ID_FIELDS)
_COLUMNS = (("name", np.int32), ("cat", np.int32), ("ts", np.float64), ("dur", np.float64),
            ("stream", np.int64), ("correlation", np.int64), ("external_id", np.int64),
            ("device", np.int64), ("thread", np.int64))


def _distinct(events: list[Event]) -> tuple[dict[_Key, int], np.ndarray]:
    """The distinct (cat, name, tid) keys of ``events`` in order of first appearance, and for
    each event the ordinal of its key, in one pass in C: ``setdefault`` gives each event its
    key's first position, which a lookup turns into the key's ordinal."""
    first: dict[_Key, int] = {}
    m = len(events)
    position = np.fromiter(map(first.setdefault, map(_KEY, events), count()), dtype=np.intp,
                           count=m)
    ordinal = np.empty(m, dtype=np.intp)
    ordinal[np.fromiter(first.values(), dtype=np.intp, count=len(first))] = np.arange(len(first))
    out: np.ndarray = ordinal[position]
    return first, out


def _kept(mask: list[bool], *lists: list[Any]) -> tuple[list[Any], ...]:
    """``lists`` with only the items where ``mask`` is true."""
    return tuple(list(compress(items, mask)) for items in lists)


class _Columns:
    """The events read so far, as one numpy array per column for each piece."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.pieces: list[dict[str, np.ndarray]] = []
        self.events_total = 0
        self.skipped: Counter[str] = Counter()
        self.float_ts = False
        self.thread_names: dict[str, int] = {}

    def add(self, events: list[Any]) -> None:
        """Events parsed by orjson (dicts): typed like msgspec's, else checked one by one."""
        try:
            records = msgspec.convert(events, EVENTS)
        except msgspec.ValidationError:
            self._careful(events)
            self.events_total += len(events)
        else:
            self.add_records(records)

    def add_records(self, events: list[Any]) -> None:
        """Events decoded by msgspec (types already checked, absent fields marked): an
        :class:`Event` for each complete event, a record of another type for other phases."""
        try:
            self._records(events)
        except OverflowError:  # an id beyond 64 bits
            self._careful([msgspec.to_builtins(e) for e in events])
            self.events_total += len(events)

    def _records(self, records: list[Any]) -> None:
        n = len(records)
        self.events_total += n
        # The first reason an event is skipped is the one counted: not 'X', no cat, no name,
        # no time. The phase filter is a comprehension: most traces hold many non-'X' events
        # (flow arrows), and one Python loop costs less than a mask built in numpy and applied.
        events: list[Event] = [e for e in records if type(e) is Event]
        if len(events) < n:
            self.skipped["other phases (not 'X')"] += n - len(events)
        # cat, name and thread are read as one key per event: a trace repeats a few hundred
        # of them, so each symbol is interned once per distinct key (_distinct).
        distinct, index = _distinct(events)
        if any(cat is None or name is None for cat, name, _ in distinct):
            events = self._named(events)
            distinct, index = _distinct(events)
        m = len(events)
        ts = np.fromiter(map(_TS, events), dtype=np.float64, count=m)
        dur = np.fromiter(map(_DUR, events), dtype=np.float64, count=m)
        timed = ~(np.isnan(ts) | np.isnan(dur))
        if not timed.all():
            self.skipped["malformed: ts or dur missing or not a number"] += m - int(timed.sum())
            (events,) = _kept(timed.tolist(), events)
            ts, dur = ts[timed], dur[timed]
            distinct, index = _distinct(events)
            m = len(events)
        # the symbols of each distinct key, in order of first appearance (as the tables grow)
        names, cats = self.names, self.cats
        cat = np.array([cats.setdefault(k[0], len(cats)) for k in distinct], dtype=np.int32)
        name = np.array([names.setdefault(k[1], len(names)) for k in distinct], dtype=np.int32)
        thread = np.array([self._thread(k[2]) for k in distinct], dtype=np.int64)
        # the five ids of every event in one pass in C: their tuples chained into one array
        ids = np.fromiter(chain.from_iterable(map(_ARG_IDS, map(_ARGS, events))),
                          dtype=np.int64, count=_N_IDS * m).reshape(m, _N_IDS)
        stream, correlation, external_id, external_id_old, device = ids.T
        self.pieces.append({
            "name": name[index], "cat": cat[index],
            "ts": ts, "dur": dur, "stream": stream, "correlation": correlation,
            "external_id": np.where(external_id != -1, external_id, external_id_old),
            "device": device, "thread": thread[index],
        })
        if not self.float_ts and bool((ts != np.floor(ts)).any()):
            self.float_ts = True  # ns resolution (an integral value written as 5.0 is not)

    def _named(self, events: list[Event]) -> list[Event]:
        """The events with a cat and a name, the others counted by the first one missing."""
        before = len(events)
        (events,) = _kept([e.cat is not None for e in events], events)
        self.skipped["no cat (HTA drops these too)"] += before - len(events)
        before = len(events)
        (events,) = _kept([e.name is not None for e in events], events)
        self.skipped["malformed: name or cat missing or not a string"] += before - len(events)
        return events

    def _thread(self, tid: Any) -> int:
        if isinstance(tid, int) and not isinstance(tid, bool) and -(2**63) <= tid < 2**63:
            return tid
        if not isinstance(tid, str):
            return -1
        return -2 - self.thread_names.setdefault(tid, len(self.thread_names))

    def _careful(self, events: list[Any]) -> None:
        """Event by event, checking every field; bad events are counted and skipped."""
        columns: dict[str, list[Any]] = {column: [] for column, _ in _COLUMNS}
        for e in events:
            if not isinstance(e, dict):
                self.skipped["not a JSON object"] += 1
                continue
            if e.get("ph") != "X":
                self.skipped["other phases (not 'X')"] += 1
                continue
            cat, name, ts, dur = e.get("cat"), e.get("name"), e.get("ts"), e.get("dur")
            if cat is None:
                self.skipped["no cat (HTA drops these too)"] += 1
                continue
            if not isinstance(cat, str) or not isinstance(name, str):
                self.skipped["malformed: name or cat missing or not a string"] += 1
                continue
            ts_us, dur_us = _number(ts), _number(dur)
            if ts_us is None or dur_us is None:
                self.skipped["malformed: ts or dur missing or not a number"] += 1
                continue
            self.float_ts = self.float_ts or ts_us != math.floor(ts_us)
            args = e.get("args")
            if not isinstance(args, dict):
                args = {}
            ext = args.get("External id")
            row = (self.names.setdefault(name, len(self.names)),
                   self.cats.setdefault(cat, len(self.cats)), ts_us, dur_us,
                   _as_int(args.get("stream", -1)), _as_int(args.get("correlation", -1)),
                   _as_int(args.get("external id", -1) if ext is None else ext),
                   _as_int(args.get("device", -1)), self._thread(e.get("tid")))
            for (column, _), value in zip(_COLUMNS, row, strict=True):
                columns[column].append(value)
        self.pieces.append({column: np.array(columns[column], dtype=dtype)
                            for column, dtype in _COLUMNS})

    def _joined(self) -> dict[str, np.ndarray]:
        """Every column, its pieces joined; each column's pieces are dropped as soon as it is
        joined, so the peak is the pieces and one column, not twice the columns."""
        pieces, self.pieces = self.pieces, []
        if not pieces:
            return {column: np.empty(0, dtype=dtype) for column, dtype in _COLUMNS}
        return {column: np.concatenate([piece.pop(column) for piece in pieces])
                for column, _ in _COLUMNS}

    def finish(self, path: str, meta: dict[str, Any]) -> TraceColumns:
        columns = self._joined()
        ts, dur = columns["ts"], columns["dur"]
        # NaN fails every comparison, so this also drops what is not a number
        valid = (dur >= 0) & (dur <= MAX_DUR_US) & (np.abs(ts) <= MAX_TS_US)
        skipped = {k: v for k, v in self.skipped.items() if v}
        everything = bool(valid.all())
        if not everything:
            skipped[OUT_OF_RANGE] = int((~valid).sum())

        def col(column: str) -> np.ndarray:
            return columns[column] if everything else columns[column][valid]

        ts, dur = col("ts"), col("dur")
        if self.float_ts:  # HTA's ns-resolution rounding (pytorch/pytorch#122425)
            end = np.floor(ts + dur)
            ts = np.ceil(ts)
            end = np.maximum(end, ts)
            dur = end - ts
        else:
            end = ts + dur
        return TraceColumns(
            path=path,
            meta=meta,
            names=tuple(self.names),
            cats=tuple(self.cats),
            name=col("name"),
            cat=col("cat"),
            ts=ts,
            dur=dur,
            end=end,
            stream=col("stream"),
            correlation=col("correlation"),
            external_id=col("external_id"),
            device=col("device"),
            thread=col("thread"),
            events_total=self.events_total,
            skipped=skipped,
            rounded_to_us=self.float_ts,
        )


def trace_files(paths: list[str | os.PathLike[str]]) -> list[str]:
    """The trace files named, a folder standing for the traces in it (sorted)."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                str(f) for f in path.iterdir()
                if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz"))
            )
            if not found:
                raise TraceFormatError(f"{path}: no trace files (*.json, *.json.gz) in it")
            out.extend(found)
        elif path.exists():
            out.append(str(path))
        else:
            raise TraceFormatError(f"{path}: no such file")
    return out
