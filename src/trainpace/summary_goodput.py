"""The ``goodput`` section of ``trainpace.summary/1``: where a job's wall time went, run by run
(filled in by :mod:`trainpace.job.goodput` when a job's ledger is read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GOODPUT_CATEGORIES: tuple[str, ...] = (
    "startup", "warmup_excess", "data_wait", "evaluation", "checkpoint_save", "checkpoint_load",
    "lost_progress", "restart_gap", "teardown", "other",
)
"""The badput categories of a job's wall time, in the order a job meets them; each is the
``<name>_s`` key of :class:`GoodputCategories`."""


@dataclass(frozen=True, kw_only=True)
class GoodputCategories:
    """Where a job's (or one run's) wall time went besides its kept training steps, in seconds;
    ``None``: not measured (the reason is in :attr:`Goodput.missing`)."""

    startup_s: float | None = None  # process start -> first step (imports, model, data set-up)
    warmup_excess_s: float | None = None  # warm-up steps beyond the steady step (compilation)
    data_wait_s: float | None = None  # kept steps waiting for their batch
    evaluation_s: float | None = None  # evaluations a framework reported
    checkpoint_save_s: float | None = None  # blocking time in saves
    checkpoint_load_s: float | None = None  # blocking time in loads
    lost_progress_s: float | None = None  # steps done again after a restart
    lost_steps: int | None = None
    restart_gap_s: float | None = None  # a run's last record -> the next run's process start
    teardown_s: float | None = None  # last step -> the process's end
    other_s: float | None = None  # outside the steps, named by nothing (see Goodput.other)


@dataclass(frozen=True, kw_only=True)
class GoodputRun:
    """One run of a job: its times (Unix seconds), status and categories, and its bands on the
    job's timeline (``{category, start_s, end_s}``, seconds from the job's start)."""

    run: int = 1
    run_id: str | None = None
    status: str | None = None  # "finished" | "failed" | "interrupted" | "killed"
    start_unix_s: float | None = None
    meter_start_unix_s: float | None = None  # where the Meter opened (imports, model before it)
    first_step_unix_s: float | None = None
    last_step_end_unix_s: float | None = None
    end_unix_s: float | None = None
    steps: int = 0
    kept_steps: int = 0
    warmup_steps: int = 0
    first_step_excess_s: float | None = None  # the first step beyond the steady one (compiling)
    productive_s: float | None = None
    resumed_from: str | None = None  # the save the next run loaded, e.g. "run 1, step 40"
    categories: GoodputCategories = field(default_factory=GoodputCategories)
    bands: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """Extension: a job's goodput (its kept training steps' time, less their data wait, over its
    wall time: first process start -> last end) and where the rest went.

    The categories and ``productive_s`` sum to ``wall_s``. ``sources`` says where each
    category's time was read; ``missing`` why one is ``None`` (its time is then in ``other``).
    """

    pct: float | None = None
    wall_s: float | None = None
    productive_s: float | None = None
    start_unix_s: float | None = None
    categories: GoodputCategories = field(default_factory=GoodputCategories)
    shares_pct: dict[str, float | None] = field(default_factory=dict)  # category -> % of wall
    sources: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    other: str | None = None  # what "other" holds
    # for the checkpoint advice (Young/Daly): the failures seen, the saves and their spacing
    failures: int | None = None  # runs that ended without finishing (killed, failed, interrupted)
    checkpoint_saves: int | None = None
    checkpoint_save_s_mean: float | None = None
    checkpoint_interval_s: float | None = None  # median start-to-start within a run
    step_s_median: float | None = None  # of the kept steps past warm-up
    runs: list[GoodputRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
