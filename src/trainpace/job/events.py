"""The job ledger's format: ``job.jsonl`` in a job's folder, one timed event per line.

A job is the runs that continue one training across restarts. Its folder holds the latest run
exactly as a run folder (meta.json, steps.jsonl, ...), each earlier run under
``runs/<run_id>/``, and this ledger, written by the single process (or rank 0) as the events
happen: a few records per run, appended and flushed one at a time, so that a SIGKILL loses at
most the event being timed at that moment.

Every line holds ``schema``, ``event``, ``run`` (1, 2, ... in the job) and ``unix_s`` (Unix
seconds; for a timed event, when it began). Steps are the run's own optimizer-step numbers (1 is
the run's first step), as in its steps.jsonl. The keys each event adds are in :data:`EVENT_KEYS`.
"""

from __future__ import annotations

from typing import Final

SCHEMA: Final = "trainpace.job/1"
LEDGER_FILE: Final = "job.jsonl"
RUNS_DIR: Final = "runs"
"""Earlier runs of the job live in ``runs/<run_id>/``; the latest at the folder's top."""

JOB_ENV: Final = "TRAINPACE_JOB"
"""``continue`` or ``new``: what a scheduler sets to say whether a process continues the job in
its folder; unset, a process continues a job whose last run did not finish, made by the same
command, whose process is gone."""

# event names
RUN_START: Final = "run_start"
FIRST_STEP: Final = "first_step"
CHECKPOINT_SAVE: Final = "checkpoint_save"
CHECKPOINT_LOAD: Final = "checkpoint_load"
EVALUATION: Final = "evaluation"
PROGRESS: Final = "progress"
RUN_END: Final = "run_end"

# run_end statuses
FINISHED: Final = "finished"
FAILED: Final = "failed"
INTERRUPTED: Final = "interrupted"

TIMING: Final = "timing"
"""An optional key of a checkpoint save or load not timed exactly: how it was bounded (an
upper bound: the span since the framework's last hook before it, what ran between included),
or why its ``duration_s`` is null."""

COMMON_KEYS: Final = ("schema", "event", "run", "unix_s")

EVENT_KEYS: Final[dict[str, tuple[str, ...]]] = {
    # the Meter opened (or `trainpace run` started); process_start_unix_s: the OS's start time
    # of this process, from which startup is timed (for a later run of the same process, or in
    # an interactive session, the Meter's making: the process was up long before)
    RUN_START: ("run_id", "pid", "host", "argv", "world_size", "process_start_unix_s"),
    # the run's first step began (unix_s)
    FIRST_STEP: (),
    # a save returned; step: steps this run had completed when it began; source: "torch.save",
    # "dcp", "lightning", "hf" or "meter"
    CHECKPOINT_SAVE: ("duration_s", "step", "path", "source"),
    # a load returned; saved_by_run / saved_at_step: the save that wrote that path (matched by
    # path), null when not one of this job's; duration_s null: not timed (TIMING says why)
    CHECKPOINT_LOAD: ("duration_s", "path", "saved_by_run", "saved_at_step", "source"),
    # an evaluation or validation loop ended, where a framework says so
    EVALUATION: ("duration_s", "source"),
    # a killed run's last completed step, written by the next run from the progress map
    # (ledgers written before the map also hold one at each window boundary)
    PROGRESS: ("step", "step_end_unix_s"),
    # the run ended: status FINISHED, FAILED or INTERRUPTED; signal: its name, or null
    RUN_END: ("status", "last_step", "last_step_end_unix_s", "signal"),
}
