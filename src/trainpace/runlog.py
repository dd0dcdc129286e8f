"""The run folder: what is in it, the records that fill it, and how to read it back.

One run is one folder (DESIGN.md)::

    meta.json      device, versions, config, DataLoader settings, world size
    steps.jsonl    one record per optimizer step, appended twice a window (at most a
                   window behind the loop: what a SIGKILL can lose)
    system.jsonl   background sampler rows (device and host readings)
    summary.json   trainpace.summary/1, refreshed during the run and written at the end
    profile/       the trace of Meter(profile_steps=...), and profile_analysis.json its analysis

A ``steps.jsonl`` record (one per optimizer step) is a
:class:`trainpace.records.StepRecord`: every key always present, null if unknown. The reader
keeps the steps as columns (:class:`trainpace.series.StepSeries`), never an object per step, so
a run of millions of steps reads in a fraction of a second; a line that is not a step record is
skipped and named in :attr:`RunData.notes`.

A ``system.jsonl`` row (one per sampler reading) has ``t_s`` on the same clock as the steps,
the metered device's headline readings at the top level (``device_util_pct``,
``memory_used_pct``, ``temperature_c``, ``bandwidth_util_pct``; null when unknown), and the
detail under ``host`` and ``gpus``.

Writing is a sink's job (``trainpace.sinks.RunFolderSink``); this module only defines the
records and reads folders back. Readers tolerate a truncated last line, which is what a run
killed in the middle of a write leaves behind.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from trainpace.errors import RunFolderError
from trainpace.inputs import JSON_MAX_BYTES, open_regular, read_bounded
from trainpace.series import StepSeries
from trainpace.steps_file import MAX_LINE_BYTES, read_steps
from trainpace.summary import Summary

META_FILE = "meta.json"
STEPS_FILE = "steps.jsonl"
SYSTEM_FILE = "system.jsonl"
SUMMARY_FILE = "summary.json"
META_SCHEMA = "trainpace.meta/1"

PROFILE_FILE = "profile_analysis.json"

_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (an editor's), read past

RecordKind = Literal["meta", "window", "system", "summary", "profile"]


@dataclass(frozen=True)
class Record:
    """What the measurement layer hands to sinks.

    ``kind`` says what ``data`` holds:

    - ``"meta"``: the run's meta dict (written again whenever it changes);
    - ``"window"``: ``{"window": aggregates, "steps": [step records]}`` at a window boundary;
    - ``"system"``: ``{"rows": [sampler rows]}``;
    - ``"summary"``: a ``trainpace.summary/1`` dict;
    - ``"profile"``: the analysis of the profiled steps' trace (``Meter(profile_steps=...)``).

    ``step`` is the last optimizer step the record covers (0 before the first step).
    """

    kind: RecordKind
    data: Mapping[str, Any]
    step: int = 0


@dataclass(frozen=True)
class RunData:
    """A run folder read back.

    ``series`` holds the steps as columns; ``notes`` says what the reader had to leave out or
    could not find (bad lines, a cut-off last line, missing steps), one line each, for the
    report to show.
    """

    path: Path
    meta: dict[str, Any]
    series: StepSeries = field(default_factory=StepSeries)
    system: list[dict[str, Any]] = field(default_factory=list)
    summary: Summary | None = None
    truncated: list[str] = field(default_factory=list)  # files whose last line was cut off
    notes: list[str] = field(default_factory=list)
    missing_steps: list[tuple[int, int]] = field(default_factory=list)  # (first, last) ranges
    # summary.json is older than steps.jsonl (fewer steps, or written before its last lines):
    # a run that died after it; its figures are rebuilt from the steps, never shown as they are
    # (None: judged by the step count alone, for a RunData made by hand)
    summary_behind: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.series, StepSeries):  # records given by hand (tests, tools)
            object.__setattr__(self, "series", StepSeries.from_records(self.series))
        if self.summary_behind is None:
            object.__setattr__(self, "summary_behind", self.summary is not None
                               and len(self.series) > self.summary.steps.total)

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The steps as records (a dict per step, built on each call): for small runs and
        tests; long runs read :attr:`series`."""
        return self.series.records()


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Read a JSON-lines file; returns (records, last_line_was_truncated).

    A last line that does not parse is dropped (a killed writer); a bad line anywhere else,
    or one longer than :data:`~trainpace.steps_file.MAX_LINE_BYTES`, is an error naming the file
    and the line. Only a regular file is read (:func:`~trainpace.inputs.open_regular`).
    """
    records: list[dict[str, Any]] = []
    bad: tuple[int, str] | None = None
    with open_regular(path, RunFolderError) as stream:
        for number, line in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""),
                                      start=1):
            if bad is not None:  # a bad line that is not the last one
                if line.strip():
                    raise RunFolderError(f"{path}:{bad[0]}: {bad[1]}")
                continue
            if number == 1 and line.startswith(_BOM):
                line = line[len(_BOM):]
            if len(line) > MAX_LINE_BYTES:
                raise RunFolderError(f"{path}:{number}: a line longer than "
                                     f"{MAX_LINE_BYTES:,} bytes; not written by trainpace")
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                bad = (number, f"not a JSON line ({exc})")
                continue
            if not isinstance(record, dict):
                raise RunFolderError(f"{path}:{number}: expected a JSON object per line")
            records.append(record)
    return records, bad is not None


def _unknown(_: str) -> None:
    """NaN and ±Infinity (not JSON, though Python writes them) read as null: unknown."""


def _finite_or_none(text: str) -> float | None:
    value = float(text)  # 1e400 is inf: a figure beyond any measurement, unknown
    return value if math.isfinite(value) else None


def read_json(path: Path) -> Any:
    """A run folder's JSON file (``meta.json``, ``summary.json``), bounded in size
    (:data:`~trainpace.inputs.JSON_MAX_BYTES`); NaN, ±Infinity and numbers beyond a float read
    as null. Raises RunFolderError naming the file."""
    data = read_bounded(path, JSON_MAX_BYTES, RunFolderError)
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_unknown,
                          parse_float=_finite_or_none)
    except UnicodeDecodeError as exc:
        raise RunFolderError(f"{path}: not UTF-8 text; is this a trainpace run folder?") from exc
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: not valid JSON ({exc})") from exc
    except ValueError as exc:  # an integer of thousands of digits
        raise RunFolderError(f"{path}: not a trainpace file ({exc})") from exc
    except RecursionError:
        raise RunFolderError(f"{path}: JSON nested too deeply to be trainpace's; not written "
                             "by trainpace") from None


def read_run(path: str | Path) -> RunData:
    """Read a run folder; raises :class:`RunFolderError` with a clear message if it is not one."""
    folder = Path(path)
    if not folder.exists():
        raise RunFolderError(f"{folder}: no such folder; pass the folder given to Meter(out=...)")
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: not a folder; pass the run folder, not a file in it")
    meta_path, summary_path = folder / META_FILE, folder / SUMMARY_FILE
    if not meta_path.exists() and not summary_path.exists():
        raise RunFolderError(
            f"{folder}: not a trainpace run folder (no {META_FILE} or {SUMMARY_FILE}); "
            "pass the folder given to Meter(out=...)"
        )
    meta: dict[str, Any] = {}
    notes: list[str] = []
    if meta_path.exists():
        raw = read_json(meta_path)
        if not isinstance(raw, dict) or raw.get("schema") != META_SCHEMA:
            schema = raw.get("schema") if isinstance(raw, dict) else None
            raise RunFolderError(
                f"{meta_path}: schema is {schema!r}, expected {META_SCHEMA!r}; "
                "not written by this version of trainpace"
            )
        meta = _checked_meta(raw, meta_path, notes)
    truncated: list[str] = []
    series = StepSeries()
    missing: list[tuple[int, int]] = []
    if (folder / STEPS_FILE).exists():
        steps_path = folder / STEPS_FILE
        read = read_steps(steps_path)
        series = read.series
        if read.truncated:
            truncated.append(STEPS_FILE)
        if read.bad_lines:
            notes.append(bad_lines_note(steps_path, read.bad_lines))
        if read.duplicates:
            notes.append(f"{steps_path}: step numbers written more than once: "
                         f"{_numbers_text(read.duplicates)}; the first record of each is kept")
        missing = series.missing_steps()
    system: list[dict[str, Any]] = []
    if (folder / SYSTEM_FILE).exists():
        system, cut = read_jsonl(folder / SYSTEM_FILE)
        if cut:
            truncated.append(SYSTEM_FILE)
    summary = None
    if summary_path.exists():
        summary = Summary.from_dict(read_json(summary_path), source=str(summary_path))
    behind = summary is not None and len(series) > 0 and (
        summary.steps.total < len(series) or _older(summary_path, folder / STEPS_FILE))
    if summary is not None and len(series):
        last = int(series.column("step").max())
        if summary.steps.total > last:  # the summary counted steps the records never got
            missing = [*missing, (last + 1, summary.steps.total)]
    if missing:
        notes.append(missing_steps_note(folder / STEPS_FILE, missing))
    return RunData(folder, meta, series, system, summary, truncated, notes, missing, behind)


_TEXT, _COUNT, _NUMBER, _OBJECT = (str,), (int,), (int, float), (dict,)
# The meta keys the readers use, and the JSON types they can be (null always can): a value of
# another type is damage, left out by name rather than crashing the report that reads it.
META_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": _TEXT, "host": _TEXT, "clock": _TEXT, "tokens_counted": _TEXT,
    "started_at": _TEXT, "finished_at": _TEXT, "world_size": _COUNT, "rank": _COUNT,
    "local_rank": _COUNT, "node": _COUNT, "loader": _OBJECT, "config": _OBJECT,
    "dist": _OBJECT, "device": _OBJECT,
}
CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "window": _COUNT, "smoothing": _NUMBER, "target_loss": _NUMBER, "warmup": (int, str),
}


def _checked_meta(meta: dict[str, Any], path: Path, notes: list[str]) -> dict[str, Any]:
    """``meta`` without the values of the wrong type (:data:`META_TYPES`), each named."""
    def bad(where: str, value: Any, kinds: tuple[type, ...]) -> bool:
        wrong = value is not None and (isinstance(value, bool) or not isinstance(value, kinds))
        if wrong:
            notes.append(f"{path}: {where} is {_kind_of(value)}, not "
                         f"{' or '.join(k.__name__ for k in kinds)}: left out")
        return wrong

    meta = {k: v for k, v in meta.items() if k not in META_TYPES
            or not bad(k, v, META_TYPES[k])}
    config = meta.get("config")
    if isinstance(config, dict):
        meta["config"] = {k: v for k, v in config.items() if k not in CONFIG_TYPES
                          or not bad(f"config.{k}", v, CONFIG_TYPES[k])}
    return meta


def _kind_of(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true or false"}.get(
        type(value), type(value).__name__)


SUMMARY_SLACK_S = 2.0  # summary.json is written just after a window's steps: within this


def _older(summary: Path, steps: Path) -> bool:
    """summary.json written well before the last lines of steps.jsonl."""
    try:
        return summary.stat().st_mtime + SUMMARY_SLACK_S < steps.stat().st_mtime
    except OSError:
        return False


def ranges_text(ranges: list[tuple[int, int]], limit: int = 6) -> str:
    """``4-9, 12, 20-31`` (the first ``limit`` ranges, then how many more)."""
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit]]
    more = len(ranges) - limit
    return ", ".join(parts) + (f" and {more} more ranges" if more > 0 else "")


def _numbers_text(numbers: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f" and {len(numbers) - limit} more" if len(numbers) > limit else "")


def bad_lines_note(path: Path, bad: list[tuple[int, str]]) -> str:
    """One line for the lines of ``path`` that were skipped: the first one and why."""
    number, why = bad[0]
    if len(bad) == 1:
        return f"{path}:{number}: skipped a line that is not a step record ({why})"
    others = ", ".join(str(n) for n, _ in bad[1:6]) + (", …" if len(bad) > 6 else "")
    return (f"{path}:{number}: skipped {len(bad)} lines that are not step records (line "
            f"{number}: {why}; also lines {others})")


def missing_steps_note(path: Path, missing: list[tuple[int, int]]) -> str:
    """One line naming the steps absent from ``path``."""
    count = sum(b - a + 1 for a, b in missing)
    return (f"{path}: {count} steps missing from the records: {ranges_text(missing)} "
            "(not written: a full disk, or a run killed mid-write); the figures cover the "
            "steps present")
