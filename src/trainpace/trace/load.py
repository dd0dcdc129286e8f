"""Read a Kineto (``torch.profiler``) Chrome trace into columns: one numpy array per field.

The file is streamed in pieces of whole events (:mod:`.stream`); each piece's complete
(``"ph": "X"``) events are appended to typed arrays and the piece is dropped. Memory is the
columns (about 60 bytes an event) plus one piece, not the whole document as Python objects.
Everything wrong with the input becomes a :class:`TraceFormatError` naming the file; a bad
event is counted and skipped, and the analysis says how many.
"""

from __future__ import annotations

import math
import os
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from trainpace.errors import TraceFormatError
from trainpace.trace.stream import Event, Source, Stream

CHUNK_BYTES = 1 << 20
# Bytes the analysis needs per byte of trace JSON (columns and their derived arrays), and the
# parsed Python objects of one piece per byte of it; measured on real traces, kept generous.
_COLUMN_BYTES_PER_JSON_BYTE = 0.5
_OBJECT_BYTES_PER_JSON_BYTE = 8.0


@dataclass(frozen=True)
class TraceColumns:
    """The complete events of one trace, as columns. Times are µs, as in the file.

    ``name`` and ``cat`` are indices into ``names`` and ``cats``;
    ``stream``, ``correlation``, ``external_id`` and ``device`` are -1 where the event has none.
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
    events_total: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
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


# ---- memory ---------------------------------------------------------------------------------


def json_bytes(path: str) -> int:
    """The size of the trace's JSON: the file size, or for gzip the smallest size consistent
    with its trailer (which stores the size modulo 4 GiB)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            stored = int.from_bytes(fh.read(4), "little")
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    wraps = max(0, math.ceil((size - stored) / 2**32))
    return stored + wraps * 2**32


def memory_needed(path: str, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Bytes of memory the analysis of one trace needs, estimated from its JSON size."""
    return int(json_bytes(path) * _COLUMN_BYTES_PER_JSON_BYTE
               + 2 * chunk_bytes * _OBJECT_BYTES_PER_JSON_BYTE) + (32 << 20)


def available_memory() -> int | None:
    """Free memory in bytes, or None if it cannot be read."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - any failure means "unknown", never a crash
        return None


def check_memory(path: str, memory_available: int | None = None) -> None:
    """Refuse a trace whose analysis would not fit in memory, before reading it."""
    free = available_memory() if memory_available is None else memory_available
    need = memory_needed(path)
    if free is not None and need > free:
        raise TraceFormatError(
            f"{path}: too large for the memory available: its {_size(json_bytes(path))} of JSON "
            f"need about {_size(need)} to analyze and {_size(free)} is free; analyze it on a "
            "machine with more memory or record fewer steps (torch.profiler.schedule(active=...))"
        )


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


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


class _Columns:
    """Typed arrays the events are appended to."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.name, self.cat = array("i"), array("i")
        self.ts, self.dur = array("d"), array("d")
        self.stream, self.correlation, self.external_id = array("q"), array("q"), array("q")
        self.device = array("q")
        self.events_total = 0
        self.skipped: Counter[str] = Counter()
        self.float_ts = False

    def _arrays(self) -> tuple[array[Any], ...]:
        return (self.name, self.cat, self.ts, self.dur, self.stream,
                self.correlation, self.external_id, self.device)

    def add(self, events: list[Any]) -> None:
        """Events parsed by orjson (dicts): typed like msgspec's, else checked one by one."""
        try:
            records = msgspec.convert(events, list[Event])
        except msgspec.ValidationError:
            self._careful(events)
            self.events_total += len(events)
        else:
            self.add_records(records)

    def add_records(self, events: list[Event]) -> None:
        """Events decoded by msgspec (types already checked, absent fields None)."""
        size = len(self.ts)
        try:
            self._records(events)
        except (OverflowError, TypeError, ValueError):  # an int beyond 64 bits
            for column in self._arrays():
                del column[size:]
            self._careful([msgspec.to_builtins(e) for e in events])
            self.events_total += len(events)

    def _records(self, events: list[Event]) -> None:
        name_id, cat_id = self.names.setdefault, self.cats.setdefault
        names, cats = self.names, self.cats
        name_add, cat_add = self.name.append, self.cat.append
        ts_add, dur_add = self.ts.append, self.dur.append
        stream_add, corr_add, ext_add = (self.stream.append, self.correlation.append,
                                         self.external_id.append)
        device_add = self.device.append
        other = no_cat = no_name = no_time = 0
        float_ts = self.float_ts
        for e in events:
            if e.ph != "X":
                other += 1
                continue
            cat, name, ts, dur = e.cat, e.name, e.ts, e.dur
            if cat is None:
                no_cat += 1
                continue
            if name is None:
                no_name += 1
                continue
            if ts is None or dur is None:
                no_time += 1
                continue
            ts_add(ts)
            dur_add(dur)
            if not float_ts and type(ts) is float:
                float_ts = True
            name_add(name_id(name, len(names)))
            cat_add(cat_id(cat, len(cats)))
            a = e.args
            if a is None:
                stream_add(-1)
                corr_add(-1)
                ext_add(-1)
                device_add(-1)
                continue
            v = a.stream
            stream_add(v if type(v) is int else -1 if v is None else _as_int(v))
            v = a.correlation
            corr_add(v if type(v) is int else -1 if v is None else _as_int(v))
            v = a.external_id if a.external_id is not None else a.external_id_old
            ext_add(v if type(v) is int else -1 if v is None else _as_int(v))
            v = a.device
            device_add(v if type(v) is int else -1 if v is None else _as_int(v))
        self.float_ts = float_ts
        self.events_total += len(events)
        self.skipped["other phases (not 'X')"] += other
        self.skipped["no cat (HTA drops these too)"] += no_cat
        self.skipped["malformed: name or cat missing or not a string"] += no_name
        self.skipped["malformed: ts or dur missing or not a number"] += no_time

    def _careful(self, events: list[Any]) -> None:
        """Event by event, checking every field; bad events are counted and skipped."""
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
            self.float_ts = self.float_ts or isinstance(ts, float)
            self.ts.append(ts_us)
            self.dur.append(dur_us)
            self.name.append(self.names.setdefault(name, len(self.names)))
            self.cat.append(self.cats.setdefault(cat, len(self.cats)))
            args = e.get("args")
            if not isinstance(args, dict):
                args = {}
            self.stream.append(_as_int(args.get("stream", -1)))
            self.correlation.append(_as_int(args.get("correlation", -1)))
            ext = args.get("External id")
            self.external_id.append(_as_int(args.get("external id", -1) if ext is None else ext))
            self.device.append(_as_int(args.get("device", -1)))

    def finish(self, path: str, meta: dict[str, Any]) -> TraceColumns:
        ts = np.frombuffer(self.ts, dtype=np.float64)
        dur = np.frombuffer(self.dur, dtype=np.float64)
        valid = (dur >= 0) & np.isfinite(ts) & np.isfinite(dur)
        skipped = {k: v for k, v in self.skipped.items() if v}
        if not valid.all():
            skipped["malformed: negative or infinite ts/dur"] = int((~valid).sum())

        everything = bool(valid.all())

        def col(values: array[Any], dtype: type) -> np.ndarray:
            out: np.ndarray = np.frombuffer(values, dtype=dtype)
            return out if everything else out[valid]

        ts, dur = col(self.ts, np.float64), col(self.dur, np.float64)
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
            name=col(self.name, np.int32),
            cat=col(self.cat, np.int32),
            ts=ts,
            dur=dur,
            end=end,
            stream=col(self.stream, np.int64),
            correlation=col(self.correlation, np.int64),
            external_id=col(self.external_id, np.int64),
            device=col(self.device, np.int64),
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
