"""The job's one run folder, agreed through the store: rank 0 picks its name, the others
take it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from trainpace.dist.exchange import Exchange
from trainpace.dist.ranks import RankInfo

logger = logging.getLogger(__name__)


def agree_run_folder(exchange: Exchange, info: RankInfo, out: Path,
                     fresh: Callable[[Path], Path]) -> Path:
    """The job's run folder for ``out=`` (rank 0 picks a fresh name with ``fresh``, the
    others take it); without an answer a rank uses the name it would pick. Sets the
    exchange's namespace to it. Never raises."""
    # The name is agreed, not the path: on other nodes (no shared filesystem) the same
    # out= may sit elsewhere; each rank keeps its own parent folder.
    name = fresh(out).name if info.rank == 0 else out.name
    try:
        name = exchange.agree(f"run_folder/{out.name}", name if info.rank == 0 else None)
    except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
        # Rank 0 slow to start, or no store: the exchange may still work later (its
        # first post says); the folder is out= as given.
        logger.warning("trainpace: agreeing on the run folder failed (%s: %s); this "
                       "rank writes under %s", type(exc).__name__, exc, out.parent / name)
    if not _plain_run_name(name, out.name):
        # The store takes writes from anyone who can reach it: a name with a path in it
        # would send this rank's files outside out=.
        logger.warning("trainpace: the run folder name agreed through the job's store "
                       "(%r) is not a folder name beside %s; this rank writes under %s",
                       name, out, out)
        name = out.name
    exchange.namespace = f"{name}/"
    return out.parent / name


def _plain_run_name(name: str, given: str) -> bool:
    """Whether ``name`` is a run folder's name that rank 0 could have picked for ``out``
    named ``given``: ``given`` itself or ``given-N``, one path component."""
    if name == given:
        return True
    number = name.removeprefix(f"{given}-")
    return number != name and number.isdigit() and number.isascii()
