"""Read a Kineto (``torch.profiler``) Chrome trace into columns: one numpy array per field.

The file is streamed in pieces of whole events (:mod:`.stream`); each piece's complete
(``"ph": "X"``) events are appended to flat columns, a field at a time (:mod:`.extract`), and
the piece is dropped; at the end the columns become numpy arrays and the unusable events are
counted and dropped, all at once. Memory is the columns (about 60 bytes an event) plus one
piece, not the whole document as Python objects.
Everything wrong with the input becomes a :class:`TraceFormatError` naming the file; a bad
event is counted and skipped, and the analysis says how many.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import msgspec
import numpy as np

from trainpace.errors import TraceFormatError
from trainpace.trace.extract import (
    N_IDS,
    NO_CAT,
    NO_NAME,
    NO_TIME,
    OUT_OF_RANGE,
    REASONS,
    EventColumns,
)
from trainpace.trace.memory import CHUNK_BYTES, check_memory
from trainpace.trace.source import Source
from trainpace.trace.stream import Stream

# Times a profiler can write, in µs: a timestamp within ~300 years of its clock's origin (the
# epoch, or boot), a span under ~11 days. Beyond them a value is damage, not a measurement,
# and it would overflow the sums and differences of the analysis.
MAX_TS_US = 1e16
MAX_DUR_US = 1e12


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
    meta, columns = _read(name, chunk_bytes)
    loaded = finish_columns(name, meta, columns)
    if not len(loaded):
        raise TraceFormatError(
            f"{name}: no complete ('ph': 'X') events with a category among its "
            f"{loaded.events_total} events: not a profiler trace, or an empty one"
        )
    return loaded


def _read(name: str, chunk_bytes: int) -> tuple[dict[str, Any], EventColumns]:
    columns = EventColumns()
    try:
        with Source(name) as source:
            meta = Stream(source, name, chunk_bytes, columns).run()
    except MemoryError as exc:
        raise TraceFormatError(
            f"{name}: ran out of memory while reading it; analyze it on a machine with more "
            "memory or record fewer steps (torch.profiler.schedule(active=...))"
        ) from exc
    return meta, columns


# ---- columns --------------------------------------------------------------------------------


def _thread(tid: Any, names: dict[str, int]) -> int:
    """The tid as a number: itself, or for a tid written as a string a negative number of its
    own (-2, -3, ... in order of first appearance)."""
    if isinstance(tid, int) and not isinstance(tid, bool) and -(2**63) <= tid < 2**63:
        return tid
    if not isinstance(tid, str):
        return -1
    return -2 - names.setdefault(tid, len(names))


def finish_columns(path: str, meta: dict[str, Any], read: EventColumns) -> TraceColumns:
    """The usable events of ``read`` as numpy columns: those with a cat, a name and a time in
    range; each skipped event counted by the first reason it fails (:data:`.extract.REASONS`).

    Symbols are numbered in order of their first usable event, so that the tables do not
    depend on how the file was cut into pieces.
    """
    keys = list(read.keys)
    key = np.frombuffer(read.key, dtype=np.int64) if len(read.key) else np.empty(0, np.int64)
    ts = np.frombuffer(read.ts, dtype=np.float64) if len(read.ts) else np.empty(0)
    dur = np.frombuffer(read.dur, dtype=np.float64) if len(read.dur) else np.empty(0)
    ids = (np.frombuffer(read.ids, dtype=np.int64) if len(read.ids)
           else np.empty(0, np.int64)).reshape(-1, N_IDS)
    skipped = Counter(read.skipped)
    no_cat = np.array([k[0] is None for k in keys], dtype=bool)
    no_name = np.array([not isinstance(k[0], str) or not isinstance(k[1], str) for k in keys],
                       dtype=bool)
    usable = ~no_name[key]  # no cat counts first, then a cat or name that is no string
    if not usable.all():
        without_cat = int(np.count_nonzero(no_cat[key]))
        skipped[NO_CAT] += without_cat
        skipped[NO_NAME] += int(np.count_nonzero(~usable)) - without_cat
    # NaN fails every comparison, so this also drops times that are absent or not numbers
    timed = ~(np.isnan(ts) | np.isnan(dur))
    untimed = usable & ~timed
    if untimed.any():
        skipped[NO_TIME] += int(np.count_nonzero(untimed))
    usable &= timed
    float_ts = bool((ts[usable] != np.floor(ts[usable])).any())  # ns resolution
    # the symbols of each key, numbered in order of the keys' first event with a cat, a name
    # and a time (one out of range too: it is skipped below, its symbols are known)
    ordinals, first = np.unique(key[usable], return_index=True)
    in_range = (dur >= 0) & (dur <= MAX_DUR_US) & (np.abs(ts) <= MAX_TS_US)
    if not (in_range | ~usable).all():
        skipped[OUT_OF_RANGE] += int(np.count_nonzero(usable & ~in_range))
    usable &= in_range
    everything = bool(usable.all())

    def col(values: np.ndarray) -> np.ndarray:
        return values if everything else values[usable]

    key, ts, dur, ids = col(key), col(ts), col(dur), col(ids)
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    threads: dict[str, int] = {}
    cat_of = np.full(len(keys), -1, dtype=np.int32)
    name_of = np.full(len(keys), -1, dtype=np.int32)
    thread_of = np.full(len(keys), -1, dtype=np.int64)
    for k in ordinals[np.argsort(first, kind="stable")].tolist():
        cat, name, tid = keys[k]
        cat_of[k] = cats.setdefault(cat, len(cats))
        name_of[k] = names.setdefault(name, len(names))
        thread_of[k] = _thread(tid, threads)
    if float_ts:  # HTA's ns-resolution rounding (pytorch/pytorch#122425)
        end = np.floor(ts + dur)
        ts = np.ceil(ts)
        end = np.maximum(end, ts)
        dur = end - ts
    else:
        end = ts + dur
    stream, correlation, external_id, external_id_old, device = (
        np.ascontiguousarray(ids[:, i]) for i in range(N_IDS))
    return TraceColumns(
        path=path,
        meta=meta,
        names=tuple(names),
        cats=tuple(cats),
        name=name_of[key],
        cat=cat_of[key],
        ts=ts,
        dur=dur,
        end=end,
        stream=stream,
        correlation=correlation,
        external_id=np.where(external_id != -1, external_id, external_id_old),
        device=device,
        thread=thread_of[key],
        events_total=read.events_total,
        skipped={reason: skipped[reason] for reason in REASONS if skipped[reason]},
        rounded_to_us=float_ts,
    )


def _path_str(p: str | os.PathLike[str]) -> str:
    """``str(pathlib.Path(p))`` without pathlib (9 ms to import: urllib, ipaddress): repeated
    and trailing slashes and ``.`` parts dropped, ``..`` kept, ``//`` kept as a root."""
    text = os.fspath(p)
    if os.name == "nt":  # pragma: no cover - Windows paths: pathlib's own rules
        from pathlib import Path

        return str(Path(text))
    root = "//" if text.startswith("//") and not text.startswith("///") else \
        "/" if text.startswith("/") else ""
    return root + "/".join(part for part in text.split("/") if part not in ("", ".")) or "."


# The JSON files trainpace itself writes into a run folder (runlog's META_FILE, SUMMARY_FILE
# and PROFILE_FILE, tested to match; runlog is not imported for three names): never traces,
# though a folder of traces may hold them (a run's profile/ holds the analysis of its trace).
RUN_FILES = frozenset({"meta.json", "summary.json", "profile_analysis.json"})
PROFILE_FOLDER = "profile"  # where Meter(profile_steps=...) writes its traces, in a run folder


def trace_files(paths: list[str | os.PathLike[str]]) -> list[str]:
    """The trace files named, a folder standing for the traces in it (sorted); a trainpace
    run folder stands for the traces its Meter recorded (``<run>/profile/``)."""
    out: list[str] = []
    for p in paths:
        path = _path_str(p)
        profile = os.path.join(path, PROFILE_FOLDER)
        if os.path.isfile(os.path.join(path, "meta.json")) and os.path.isdir(profile):
            path = profile
        if os.path.isdir(path):
            children = (name if path == "." else os.path.join(path, name)
                        for name in os.listdir(path)
                        if (name.endswith(".json") or name.endswith(".json.gz"))
                        and name not in RUN_FILES)
            found = sorted(f for f in children if os.path.isfile(f))
            if not found:
                raise TraceFormatError(f"{path}: no trace files (*.json, *.json.gz) in it")
            out.extend(found)
        elif os.path.exists(path):
            out.append(path)
        else:
            raise TraceFormatError(f"{path}: no such file")
    return out
