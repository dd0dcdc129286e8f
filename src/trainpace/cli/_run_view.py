"""What ``trainpace run`` shows while the script runs: the live panel (at rank 0 of a job, the
job's figures; on the other ranks nothing, unless ``--all-ranks``), with the warnings logged
to stderr above it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any


def what_this_rank_shows(info: Any, all_ranks: bool) -> str:
    """``run`` (one process), ``job`` (rank 0 of a job: the job's figures), ``rank`` (another
    rank under --all-ranks: its own) or ``nothing`` (another rank)."""
    if not info.distributed:
        return "run"
    if info.rank == 0:
        return "job"
    return "rank" if all_ranks else "nothing"


def live_view(name: str, info: Any, shows: str, *, quiet: bool,
              counts_known: Callable[[], bool]) -> Any:
    """The live panel on stderr (None: ``--quiet``, or a rank that shows nothing)."""
    from trainpace.report.live import LiveView

    if quiet or shows == "nothing":
        return None
    title = {"run": name, "job": f"{name} · job of {info.world_size} ranks",
             "rank": f"{name} · rank {info.rank}"}[shows]
    return LiveView(sys.stderr, title=title, redirect_stdout=sys.stdout.isatty(),
                    counts_known=counts_known)


class _JobView:
    """The live view at rank 0 of a job: it shows the job (the Meter feeds it each window
    once every rank has sent it, and the merged summary), not rank 0's own figures."""

    shows_job = True
    reads_steps = False

    def __init__(self, view: Any) -> None:
        self._view = view

    def log(self, record: Any) -> None:
        self._view.log(record)

    def close(self) -> None:
        """The view is closed by ``run`` (before the report)."""


def view_sinks(live: Any, shows: str) -> list[Any]:
    """The Meter's sinks that feed the live view."""
    if live is None:
        return []
    return [_JobView(live) if shows == "job" else live]


def reroute_logging(old: Any, new: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """Warnings logged to stderr go above the live panel too (not through it)."""
    if new is old:
        return []
    return [(handler, handler.setStream(new)) for handler in logging.getLogger().handlers
            if isinstance(handler, logging.StreamHandler) and handler.stream is old]
