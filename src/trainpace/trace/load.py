"""Read a Kineto (``torch.profiler``) Chrome trace into columns: one numpy array per field.

The file is streamed: gzip is decompressed in blocks, the ``traceEvents`` array is cut at
event boundaries into pieces of a few MB, each piece is parsed by orjson and its complete
(``"ph": "X"``) events are appended to typed arrays, and the piece is dropped. Memory is the
columns (about 50 bytes an event) plus one piece, not the whole document as Python objects.

Cutting is safe without a JSON tokenizer: a piece ends at a ``}`` followed by ``,`` or ``]``.
If that ``}`` was inside a string or a nested object, the piece does not parse *and* the parse
fails at its very end; a failure anywhere else is damage in the file, reported with its
offset. Everything wrong with the input becomes a :class:`TraceFormatError` naming the file.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from trainpace.errors import TraceFormatError

CHUNK_BYTES = 4 << 20
_HEADER_LIMIT = 64 << 20
_WS = b" \t\r\n"
_KEY = b'"traceEvents"'
_CLOSE, _COMMA, _BRACKET = ord("}"), ord(","), ord("]")
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
        with _Source(name) as source:
            meta = _Stream(source, name, chunk_bytes, columns.add).run()
    except MemoryError as exc:
        raise TraceFormatError(
            f"{name}: ran out of memory while reading it; analyze it on a machine with more "
            "memory or record fewer steps (torch.profiler.schedule(active=...))"
        ) from exc
    return columns.finish(name, meta)


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


# ---- bytes ----------------------------------------------------------------------------------


class _Source:
    """The decompressed bytes of a trace file; every read error is a TraceFormatError."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._raw: IO[bytes] | None = None
        self._stream: IO[bytes] | gzip.GzipFile | None = None

    def __enter__(self) -> _Source:
        try:
            self._raw = open(self.path, "rb")  # closed in __exit__
            gz = self._raw.read(2) == b"\x1f\x8b"
            self._raw.seek(0)
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: cannot read it ({exc.strerror or exc})") from exc
        self._stream = gzip.GzipFile(fileobj=self._raw) if gz else self._raw
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self._stream, self._raw):
            if stream is not None:
                stream.close()

    def read(self, size: int) -> bytes:
        assert self._stream is not None
        try:
            return self._stream.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceFormatError(
                f"{self.path}: the gzip stream is damaged or truncated ({exc}); "
                "the profiler may have been killed while writing it"
            ) from exc
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: cannot read it ({exc})") from exc


class _Stream:
    """Walks the document: the keys around ``traceEvents`` and the events in pieces."""

    def __init__(self, source: _Source, path: str, chunk_bytes: int,
                 sink: Callable[[list[Any]], None]) -> None:
        self.source, self.path, self.chunk, self.sink = source, path, max(chunk_bytes, 64), sink
        self.buf = b""
        self.pos = 0
        self.offset = 0  # position of buf[0] in the decompressed stream
        self.hold: int | None = None  # keep the bytes from here (absolute) when reading on
        self.eof = False

    # -- buffer
    def _more(self, want: int) -> bool:
        """Read until ``want`` bytes lie after pos (or the end); False if nothing was added."""
        if self.eof or len(self.buf) - self.pos >= want:
            return False
        drop = self.pos if self.hold is None else min(self.pos, self.hold - self.offset)
        if drop > 0:
            self.offset += drop
            self.buf, self.pos = self.buf[drop:], self.pos - drop
        parts = [self.buf]
        have = len(self.buf)
        while have < want:
            block = self.source.read(max(want - have, 1 << 16))
            if not block:
                self.eof = True
                break
            parts.append(block)
            have += len(block)
        self.buf = b"".join(parts)
        return have > len(parts[0]) or self.eof

    def _skip_ws(self) -> int:
        """Skip whitespace; return the next byte, or -1 at the end of the file."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return -1
            self._more(self.chunk)

    def _fail(self, what: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}: {what}")

    # -- document
    def run(self) -> dict[str, Any]:
        self._more(self.chunk)
        if self.buf.startswith(b"\xef\xbb\xbf"):
            self.pos = 3
        first = self._skip_ws()
        if first == -1:
            raise self._fail("the file is empty")
        if first == ord("["):  # the JSON Array Format: events only
            self.pos += 1
            self._events()
            if self._skip_ws() != -1:
                raise self._fail("unexpected data after the array of events")
            return {}
        if first != ord("{"):
            raise self._fail(f"not JSON: it starts with {self.buf[self.pos:self.pos + 20]!r}")
        self.hold = self.offset + self.pos
        meta = self._header()
        if meta is None:
            self.pos = self.hold - self.offset
            return self._whole()
        self.hold = None
        self._events()
        return {**meta, **self._trailer()}

    def _header(self) -> dict[str, Any] | None:
        """The keys before ``traceEvents``; None if the key is not where streaming can use it."""
        while (k := self.buf.find(_KEY, self.pos)) < 0:
            if self.eof or len(self.buf) - self.pos > _HEADER_LIMIT:
                return None
            self._more(len(self.buf) - self.pos + self.chunk)
        head = self.buf[self.pos:k].rstrip(_WS)
        self.pos = k + len(_KEY)
        if self._skip_ws() != ord(":"):
            return None
        self.pos += 1
        if self._skip_ws() != ord("["):
            return None
        self.pos += 1
        if head == b"{":
            return {}
        if not head.endswith(b","):
            return None
        try:
            meta = orjson.loads(head[:-1] + b"}")
        except orjson.JSONDecodeError:
            return None  # the key sat inside another value
        return meta if isinstance(meta, dict) else None

    def _events(self) -> None:
        """Parse the array's elements, a piece at a time, up to and including its ``]``."""
        want = self.chunk
        while True:
            nxt = self._skip_ws()
            if nxt == _BRACKET:
                self.pos += 1
                return
            if nxt == -1:
                raise self._fail("the file ends inside traceEvents: it is truncated")
            self._more(want)
            done = self._piece()
            if done is None:
                if self.eof:
                    raise self._fail(
                        f"the file ends inside traceEvents (byte {self.offset + self.pos}): "
                        "it is truncated or not valid JSON"
                    )
                want *= 2
                continue
            want = self.chunk
            if done:
                return

    def _piece(self) -> bool | None:
        """Parse a piece of whole events from the buffer: True at the array's end, False after
        a piece, None if no cut point in the buffer parses (more data is needed).

        The longest pieces are tried first (the last cut points); if the last few all fall
        inside strings, the shortest ones, so a long string full of "}," still makes progress.
        """
        for j, k in self._cuts():
            text = b"[" + self.buf[self.pos:j + 1] + b"]"
            try:
                events = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                decoded = text.decode("utf-8", errors="replace")
                if exc.pos < len(decoded) - 1:
                    at = self.offset + self.pos + len(decoded[1:exc.pos].encode())
                    raise self._fail(f"not valid JSON at byte {at}: {exc.msg}") from exc
                continue  # the cut was inside a string or a nested object
            self.sink(events)
            at_end = self.buf[k] == _BRACKET
            self.pos = k + 1
            return at_end
        return None

    def _cuts(self) -> Iterator[tuple[int, int]]:
        """Cut points ``(j, k)``: a ``}`` at j whose next non-space byte, at k, is , or ]."""
        buf, start = self.buf, self.pos

        def separator(j: int) -> int:
            k = j + 1
            while k < len(buf) and buf[k] in _WS:
                k += 1
            return k if k < len(buf) and buf[k] in (_COMMA, _BRACKET) else -1

        hi, tried = len(buf), 0
        while tried < 4 and (j := buf.rfind(b"}", start, hi)) >= 0:
            hi = j
            if (k := separator(j)) >= 0:
                tried += 1
                yield j, k
        lo = start
        while (j := buf.find(b"}", lo, hi)) >= 0:
            lo = j + 1
            if (k := separator(j)) >= 0:
                yield j, k

    def _trailer(self) -> dict[str, Any]:
        """The keys after the ``traceEvents`` array."""
        while self._more(len(self.buf) - self.pos + self.chunk):
            pass
        tail = self.buf[self.pos:].strip(_WS)
        if tail == b"}":
            return {}
        if not tail:
            raise self._fail("the file ends after traceEvents without its closing '}': "
                             "it is truncated")
        if not tail.startswith(b","):
            raise self._fail(f"unexpected data after traceEvents: {tail[:20]!r}")
        try:
            meta = orjson.loads(b"{" + tail[1:])
        except orjson.JSONDecodeError as exc:
            raise self._fail(f"not valid JSON after traceEvents: {exc.msg}") from exc
        if not isinstance(meta, dict):  # pragma: no cover - '{' always parses to a dict
            raise self._fail("not valid JSON after traceEvents")
        return meta

    def _whole(self) -> dict[str, Any]:
        """The fallback for an unusual layout: parse the whole document at once."""
        while self._more(len(self.buf) - self.pos + (64 << 20)):
            pass
        try:
            doc = orjson.loads(self.buf[self.pos:])
        except orjson.JSONDecodeError as exc:
            raise self._fail(f"not valid JSON ({exc.msg})") from exc
        self.buf = b""
        if not isinstance(doc, dict):
            raise self._fail(f"JSON but not a trace: a {type(doc).__name__} at the top level")
        events = doc.pop("traceEvents", None)
        if events is None:
            keys = ", ".join(sorted(map(str, doc))[:8]) or "none"
            raise self._fail(
                f"JSON but not a profiler trace: no 'traceEvents' key (keys: {keys})"
            )
        if not isinstance(events, list):
            raise self._fail(f"'traceEvents' is a {type(events).__name__}, not a list")
        for i in range(0, len(events), 100_000):
            self.sink(events[i:i + 100_000])
        return doc


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
        size = len(self.ts)
        try:
            self._fast(events)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
            for column in self._arrays():
                del column[size:]
            self._careful(events)
        self.events_total += len(events)

    def _fast(self, events: list[Any]) -> None:
        """The common case, one tight loop; any surprise falls back to :meth:`_careful`."""
        name_id, cat_id = self.names.setdefault, self.cats.setdefault
        names, cats = self.names, self.cats
        name_add, cat_add = self.name.append, self.cat.append
        ts_add, dur_add = self.ts.append, self.dur.append
        stream_add, corr_add, ext_add = (self.stream.append, self.correlation.append,
                                         self.external_id.append)
        device_add = self.device.append
        other = no_cat = 0
        float_ts = self.float_ts
        for e in events:
            if e["ph"] != "X":
                other += 1
                continue
            cat = e.get("cat")
            if cat is None:
                no_cat += 1
                continue
            name = e["name"]
            ts, dur = e["ts"], e["dur"]
            if type(name) is not str or type(cat) is not str:
                raise TypeError
            ts_add(ts)
            dur_add(dur)
            if not float_ts and type(ts) is float:
                float_ts = True
            name_add(name_id(name, len(names)))
            cat_add(cat_id(cat, len(cats)))
            args = e.get("args")
            if args:
                stream_add(args.get("stream", -1))
                corr_add(args.get("correlation", -1))
                ext = args.get("External id")
                ext_add(args.get("external id", -1) if ext is None else ext)
                device_add(args.get("device", -1))
            else:
                stream_add(-1)
                corr_add(-1)
                ext_add(-1)
                device_add(-1)
        self.float_ts = float_ts
        self.skipped["other phases (not 'X')"] += other
        self.skipped["no cat (HTA drops these too)"] += no_cat

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
