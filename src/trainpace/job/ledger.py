"""Reading a job back: its ledger (``job.jsonl``) and its runs, each placed on the Unix clock.

:func:`read_job` gives a :class:`Job`: the ledger's events, checked line by line (a bad line is
skipped and named in :attr:`Job.notes`, as the run-log reader does), and one :class:`JobRun` per
run, with its run folder read by :func:`trainpace.runlog.read_run` and the times the goodput
needs (process start, first step, last step's end, the run's end) taken from the best source
there is, the source named. A folder without ``job.jsonl`` is a job of one run.

What does not fit the job is said, never raised: a run folder from another job (its run id or
command not the ledger's) is left out; overlapping runs, a clock that went backwards between
runs and a run killed before its first step are kept and named in the notes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from trainpace.errors import RunFolderError
from trainpace.inputs import open_regular
from trainpace.job import events as ev
from trainpace.runlog import RunData, read_run
from trainpace.steps_file import MAX_LINE_BYTES

_NUMBER = (int, float)
# the JSON types of the keys the reader uses (null allowed where the format says so)
_KEY_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {  # key -> (types, null allowed)
    "run": ((int,), False),
    "unix_s": (_NUMBER, False),
    "run_id": ((str,), False),
    "pid": ((int,), True),
    "argv": ((list,), True),
    "process_start_unix_s": (_NUMBER, True),
    "duration_s": (_NUMBER, True),  # null only on a load not timed (see below)
    "step": ((int,), True),
    "saved_by_run": ((int,), True),
    "saved_at_step": ((int,), True),
    "status": ((str,), False),
    "last_step": ((int,), True),
    "last_step_end_unix_s": (_NUMBER, True),
    "step_end_unix_s": (_NUMBER, True),
}
TIMED_EVENTS = (ev.CHECKPOINT_SAVE, ev.CHECKPOINT_LOAD, ev.EVALUATION)
"""Events that carry a ``duration_s``: time taken out of whatever part of the run they fell in."""

KILLED = "killed"
"""A run's status when the ledger has no ``run_end`` for it (SIGKILL, a lost node, OOM-kill)."""


@dataclass(frozen=True)
class JobRun:
    """One run (process) of a job, on the Unix clock.

    Times are Unix seconds, ``None`` where nothing recorded them; ``*_source`` says where each
    came from. ``data`` is the run folder read back (``None`` when the ledger names a run
    whose folder is gone).
    """

    number: int  # 1, 2, ... in the job
    run_id: str | None
    path: Path | None
    data: RunData | None
    events: list[dict[str, Any]]  # this run's ledger events, in file order
    status: str  # "finished" | "failed" | "interrupted" | KILLED (no run_end)
    process_start_unix_s: float | None
    process_start_source: str | None
    meter_start_unix_s: float | None  # when the Meter was made (meta.json's started_at)
    steps_zero_unix_s: float | None  # where the steps' t_s count from (the first_step event)
    first_step_unix_s: float | None
    last_step_end_unix_s: float | None
    end_unix_s: float
    end_source: str

    @property
    def start_unix_s(self) -> float:
        """The run's earliest known time: its process start, else the Meter's start, else its
        end (a run with nothing else recorded)."""
        for t in (self.process_start_unix_s, self.meter_start_unix_s, self.first_step_unix_s):
            if t is not None:
                return t
        return self.end_unix_s

    @property
    def steps(self) -> int:
        return len(self.data.series) if self.data is not None else 0

    def timed(self, event: str) -> list[dict[str, Any]]:
        """This run's events named ``event``."""
        return [e for e in self.events if e["event"] == event]


@dataclass(frozen=True)
class Job:
    """A job folder read back: its runs in order, the ledger's events, and what the reader had
    to leave out or found wrong (``notes``, one line each, for the report to show)."""

    path: Path
    runs: list[JobRun]
    events: list[dict[str, Any]] = field(default_factory=list)
    has_ledger: bool = False
    notes: list[str] = field(default_factory=list)


def read_job(folder: str | Path, *, top: RunData | None = None) -> Job:
    """Read a job folder (or a plain run folder: a job of one run).

    ``top``: the folder's own run, when the caller has read it already (it is not read again).
    Raises :class:`RunFolderError` only when the folder is not a trainpace folder at all (what
    :func:`~trainpace.runlog.read_run` says); everything else is a note.
    """
    path = Path(folder)
    ledger_path = path / ev.LEDGER_FILE
    if not ledger_path.is_file():
        latest = _with_rank_steps(top if top is not None else read_run(path))
        run = _place(number=1, run_id=latest.meta.get("run_id"), data=latest, events=[])
        return Job(path=path, runs=[run], notes=list(latest.notes) if top is None else [])
    notes: list[str] = []
    events = read_ledger(ledger_path, notes)
    folders = _run_folders(path, notes, top)
    starts = {e["run"]: e for e in events if e["event"] == ev.RUN_START}
    numbers = sorted({e["run"] for e in events})
    by_id = {str(e["run_id"]): n for n, e in starts.items()}
    matched: dict[int, RunData] = {}
    for data in folders:
        run_id = data.meta.get("run_id")
        where = _shown_path(data.path, path)
        number = by_id.get(str(run_id)) if run_id is not None else None
        if number is None:
            known = ", ".join(repr(str(e["run_id"])) for e in starts.values()) or "none"
            notes.append(f"{where}: a run folder from another job (its run id {run_id!r} is "
                         f"not one of {ledger_path}'s runs: {known}); left out. Move it out "
                         "of the job folder")
            continue
        argv, meta_argv = starts[number].get("argv"), data.meta.get("argv")
        if isinstance(argv, list) and isinstance(meta_argv, list) and not _same_command(
                argv, meta_argv):
            notes.append(f"{where}: a run folder from another job (its command "
                         f"{' '.join(map(str, meta_argv))!r} is not run {number}'s in "
                         f"{ledger_path}: {' '.join(map(str, argv))!r}); left out")
            continue
        if number in matched:
            notes.append(f"{where}: a second folder for run {number} ({run_id!r}); left out")
            continue
        matched[number] = data
        if top is None or data.path != top.path:  # the caller has the top's own notes
            notes.extend(data.notes)
    runs = []
    for number in numbers:
        run_events = [e for e in events if e["run"] == number]
        if number not in starts:
            notes.append(f"{ledger_path}: run {number} has events but no {ev.RUN_START}; its "
                         "process start is unknown")
        found = matched.get(number)
        if found is None and number in starts:
            notes.append(f"{ledger_path}: run {number} ({starts[number]['run_id']!r}) has no "
                         "run folder here; it is timed from its ledger events alone")
        run_id = starts[number]["run_id"] if number in starts else (
            found.meta.get("run_id") if found is not None else None)
        runs.append(_place(number=number, run_id=run_id, data=found, events=run_events))
    if not runs:
        notes.append(f"{ledger_path}: no run in the ledger; the top-level run is read alone")
        top = read_run(path)
        runs = [_place(number=1, run_id=top.meta.get("run_id"), data=top, events=[])]
    notes.extend(_order_notes(runs, ledger_path))
    return Job(path=path, runs=runs, events=events, has_ledger=True, notes=notes)


def read_ledger(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The ledger's events, each checked (schema, event name, keys and their types); a line
    that is not one is skipped, the skipped lines named in one note. A cut-off last line (a
    SIGKILL mid-write) is said as such."""
    events: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    with open_regular(path, RunFolderError) as stream:
        for number, line in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""),
                                      start=1):
            if not line.strip():
                continue
            why = None
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                why = ("cut off (a process killed mid-write)" if not line.endswith(b"\n")
                       else "not a JSON line")
            else:
                why = _invalid(record)
            if why is None:
                events.append(record)
            else:
                bad.append((number, why))
    if bad:
        number, why = bad[0]
        more = (f"; also lines {', '.join(str(n) for n, _ in bad[1:6])}"
                f"{', …' if len(bad) > 6 else ''}" if len(bad) > 1 else "")
        notes.append(f"{path}:{number}: skipped {len(bad)} line{'s' if len(bad) > 1 else ''} "
                     f"that {'are' if len(bad) > 1 else 'is'} not a {ev.SCHEMA} event "
                     f"(line {number}: {why}{more})")
    return events


def _invalid(record: Any) -> str | None:
    """Why ``record`` is not a ledger event, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("schema") != ev.SCHEMA:
        return f"schema is {record.get('schema')!r}, expected {ev.SCHEMA!r}"
    event = record.get("event")
    if event not in ev.EVENT_KEYS:
        return f"unknown event {event!r}"
    for key in (*ev.COMMON_KEYS[2:], *ev.EVENT_KEYS[event]):
        if key not in record:
            return f"{event} without {key!r}"
        if key in _KEY_TYPES:
            kinds, nullable = _KEY_TYPES[key]
            value = record[key]
            if value is None and nullable:
                continue
            if isinstance(value, bool) or not isinstance(value, kinds) or (
                    isinstance(value, float) and not math.isfinite(value)):
                return f"{event}'s {key} is {value!r}"
    if record["run"] < 1:
        return f"run is {record['run']}, expected 1, 2, ..."
    if event in TIMED_EVENTS:
        duration_s = record["duration_s"]
        if duration_s is None and event != ev.CHECKPOINT_LOAD:
            return f"{event}'s duration_s is null"
        if duration_s is not None and duration_s < 0:
            return f"{event}'s duration_s is negative ({duration_s})"
    return None


def _run_folders(path: Path, notes: list[str], top: RunData | None) -> list[RunData]:
    """The earlier runs (``runs/*/``), then the latest (the folder's top), each read; a folder
    that is not a run is named and left out."""
    found: list[RunData] = []
    runs_dir = path / ev.RUNS_DIR
    candidates = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    for candidate in [*candidates, path]:
        if candidate == path and top is not None:
            found.append(_with_rank_steps(top))
            continue
        try:
            found.append(_with_rank_steps(read_run(candidate)))
        except RunFolderError as exc:
            if candidate != path:  # the top is empty until the first run writes there
                notes.append(f"{exc}; left out of the job")
    return found


def _with_rank_steps(run: RunData) -> RunData:
    """A torchrun job's run: its steps are in ``rank0/`` (timed from rank 0's own start)."""
    rank0 = run.path / "rank0"
    if len(run.series) or not rank0.is_dir():
        return run
    try:
        ranked = read_run(rank0)
    except RunFolderError:
        return run
    meta = {**run.meta, "started_at": ranked.meta.get("started_at"),
            "config": ranked.meta.get("config", run.meta.get("config"))}
    return dataclasses.replace(run, meta=meta, series=ranked.series, summary=ranked.summary,
                               summary_behind=ranked.summary_behind)


def _same_command(ledger: list[Any], meta: list[Any]) -> bool:
    """The same command: the same arguments, and a script of the same name (the ledger holds
    it resolved, meta.json as typed)."""
    if len(ledger) != len(meta):
        return False
    if ledger and Path(str(ledger[0])).name != Path(str(meta[0])).name:
        return False
    return [str(a) for a in ledger[1:]] == [str(a) for a in meta[1:]]


def _shown_path(path: Path, job: Path) -> str:
    return str(path) if path != job else f"{job} (the latest run)"


def _unix(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _place(*, number: int, run_id: Any, data: RunData | None,
           events: list[dict[str, Any]]) -> JobRun:
    """The run's times on the Unix clock, each from the best source recorded."""
    start = next((e for e in events if e["event"] == ev.RUN_START), None)
    end = next((e for e in events if e["event"] == ev.RUN_END), None)
    first = next((e for e in events if e["event"] == ev.FIRST_STEP), None)
    meter_start = _unix(data.meta.get("started_at")) if data is not None else None
    if start is not None and start.get("process_start_unix_s") is not None:
        process_start, process_source = float(start["process_start_unix_s"]), "job.jsonl run_start"
    else:
        process_start, process_source = None, None
    steps_first = steps_last = None
    # The steps' t_s count from the run's first data touch, which the ledger's first_step
    # event holds; meta.json's started_at (when the Meter was made, maybe long before) is the
    # fallback for a run folder without a ledger.
    steps_zero = float(first["unix_s"]) if first is not None else meter_start
    if data is not None and len(data.series) and steps_zero is not None:
        t_s, step_s = data.series.column("t_s"), data.series.column("step_s")
        steps_first = steps_zero + float(t_s[0] - step_s[0])
        steps_last = steps_zero + float(np.max(t_s))
    first_step = float(first["unix_s"]) if first is not None else steps_first
    last_ends = [t for t in (steps_last,
                             *(e.get("step_end_unix_s") for e in events
                               if e["event"] == ev.PROGRESS),
                             end.get("last_step_end_unix_s") if end is not None else None)
                 if t is not None]
    last_step_end = max(last_ends) if last_ends else None
    if end is not None:
        end_unix, end_source, status = float(end["unix_s"]), "job.jsonl run_end", end["status"]
    else:
        # killed: its end is its last record (a step's end, an event's end)
        records = [*last_ends, *(float(e["unix_s"]) + float(e.get("duration_s") or 0.0)
                                 for e in events)]
        if data is not None and meter_start is not None:
            records.append(meter_start)
        finished_at = _unix(data.meta.get("finished_at")) if data is not None else None
        if not events and finished_at is not None:  # a run folder without a ledger
            end_unix, end_source, status = max(finished_at, *records), "meta.json finished_at", (
                ev.FINISHED)
        elif records:
            end_unix, end_source = max(records), "its last record"
            status = KILLED
        else:
            end_unix, end_source, status = process_start or 0.0, "nothing recorded", KILLED
    return JobRun(
        number=number, run_id=str(run_id) if run_id is not None else None,
        path=data.path if data is not None else None, data=data, events=events, status=status,
        process_start_unix_s=process_start, process_start_source=process_source,
        meter_start_unix_s=meter_start, steps_zero_unix_s=steps_zero, first_step_unix_s=first_step,
        last_step_end_unix_s=last_step_end, end_unix_s=end_unix, end_source=end_source)


def _order_notes(runs: list[JobRun], ledger: Path) -> list[str]:
    """What is wrong with the runs' order in time: a run killed before its first step, a run
    starting before the previous one's last record, a clock that went backwards."""
    notes = [f"{ledger}: run {run.number} ({run.run_id!r}) ended ({run.status}) before its "
             "first step; all of its time is counted as startup"
             for run in runs if run.first_step_unix_s is None and run.status != ev.FINISHED]
    for before, after in itertools.pairwise(runs):
        gap = after.start_unix_s - before.end_unix_s
        if gap >= 0:
            continue
        if after.start_unix_s < before.start_unix_s:
            notes.append(f"{ledger}: the clock went backwards between runs {before.number} and "
                         f"{after.number} (run {after.number} starts {-gap:.3f} s before run "
                         f"{before.number}'s last record, and before run {before.number} "
                         "started): were they on machines whose clocks disagree? The runs "
                         "are laid end to end, with no restart gap between them")
        else:
            notes.append(f"{ledger}: runs {before.number} and {after.number} overlap (run "
                         f"{after.number} starts {-gap:.3f} s before run {before.number}'s last "
                         f"record): two processes wrote one job. The runs are laid end to "
                         "end, with no restart gap between them; give each its own --out")
    return notes
