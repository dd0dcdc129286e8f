"""Claiming a run folder: an exclusive claim, a job continued in its folder, rank folders.

A folder is claimed when a run starts (:func:`claim_run_folder`): an exclusive claim file, so
two Meters (or two processes) given the same ``out=`` never write into one folder. A folder
that holds a run of the same job (the same command, a run that did not finish, its process
gone; or ``TRAINPACE_JOB``) is continued: the earlier run's files move into ``runs/<run_id>/``
(:mod:`trainpace.job.events`). Nothing is followed through a symbolic link, and a folder of
files that are not a trainpace job is never written into.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from trainpace.errors import ConfigError
from trainpace.job.events import (
    FINISHED,
    JOB_ENV,
    LEDGER_FILE,
    RUN_END,
    RUN_START,
    RUNS_DIR,
    SCHEMA,
)
from trainpace.job.process import ProcessId, job_command, running, this_process
from trainpace.runlog import (
    META_FILE,
    PROFILE_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    SYSTEM_FILE,
)

logger = logging.getLogger(__name__)

CLAIM_FILE = ".trainpace-claim"
"""Made with O_EXCL in a run folder when a run takes it: whoever makes it owns the folder. It
holds the owner's pid, host and start time, so that a claim left by a killed process is known
to be stale (and taken over by the process that continues its job)."""

# What a run writes at the top of its folder: moved into runs/<run_id>/ when the next run of
# the job starts. Anything else there (the user's checkpoints) stays where the script put it.
RUN_FILES = (META_FILE, STEPS_FILE, SYSTEM_FILE, SUMMARY_FILE, PROFILE_FILE, "profile")

JOB_MODES = ("continue", "new")

# the refusals TRAINPACE_JOB=continue overrides (never a live run's, nor files not a job's)
_FINISHED_THERE = "a job whose run there finished"
_ANOTHER_COMMAND = "another command's run"


def claim_run_folder(path: Path, *, argv: Sequence[str] | None = None,
                     env: Mapping[str, str] | None = None) -> Path:
    """``path``, or ``path-2``, ``path-3``... : the first one no other run holds, claimed
    atomically for this one (a folder claimed by another Meter or process a moment before is
    never written into).

    ``path`` holding a job whose last run did not finish, was made by the same command
    (``argv``, default ``sys.argv``) and whose process is gone is continued: its latest run
    is moved into ``runs/<run_id>/`` and ``path`` is this run's. ``TRAINPACE_JOB`` in ``env``
    (default ``os.environ``) overrides: ``continue`` (whatever the last run's end or
    command) or ``new`` (never)."""
    mode = _job_mode(os.environ if env is None else env)
    command = job_command(sys.argv if argv is None else argv)
    if not path.name:  # "." or "..": the folder's own name, for the names beside it
        path = path.resolve()
    candidate, n = path, 1
    refused: str | None = None
    while True:
        if _claim(candidate, key_value=path):
            why = _why_not_ours(candidate, command, mode)
            if why is None:
                break
            (candidate / CLAIM_FILE).unlink(missing_ok=True)
            if candidate == path:
                refused = why
        elif candidate == path:
            owner = _claim_owner(path / CLAIM_FILE)
            refused = "a run still going" + (f" (pid {owner.pid})" if owner else "")
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    if candidate != path:
        hint = (f" ({JOB_ENV}=continue continues the job there)"
                if refused in (_FINISHED_THERE, _ANOTHER_COMMAND) else "")
        logger.warning("trainpace: %s holds %s; writing this run to %s%s", path, refused,
                       candidate, hint)
    return candidate


def claim_rank_folder(folder: Path) -> None:
    """A rank's ``rank{r}/`` inside the job's run folder (named by rank 0), made where it is
    missing and never reached through a symbolic link: on a filesystem the ranks do not share,
    either folder may have been planted by someone else (a link to any folder would receive
    this rank's files). Raises :class:`ConfigError` naming the folder that is refused."""
    _real_folder(folder.parent, parents=True)
    _real_folder(folder, parents=False)


def _real_folder(path: Path, *, parents: bool) -> None:
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)  # never through a link: on one it fails (EEXIST), following nothing
        mode = os.lstat(path).st_mode  # the entry itself, not what a link points to
    except OSError as exc:
        raise ConfigError("out", str(path), f"cannot be made into a run folder "
                          f"({exc.strerror or exc})") from exc
    if not stat.S_ISDIR(mode):
        kind = "a symbolic link" if path.is_symlink() else "not a folder"
        raise ConfigError("out", str(path), f"is {kind}, which a rank's run folder never "
                          "goes through; remove it or give another out=")


def _job_mode(env: Mapping[str, str]) -> str | None:
    value = env.get(JOB_ENV)
    if value is None or value == "":
        return None
    if value not in JOB_MODES:
        raise ConfigError(JOB_ENV, value, "must be 'continue' (this process continues the job "
                          "in its run folder) or 'new' (it starts a new one); unset it for the "
                          "default (continue a run that did not finish, of the same command)")
    return value


def move_earlier_rank_run(rank_folder: Path) -> None:
    """A rank of a distributed job continued in its folder: the ``rank{r}/`` its earlier run
    left goes into ``runs/<that run's id>/rank{r}/`` (each rank moves its own; rank 0 moved
    the job's top-level files when it claimed the folder)."""
    if rank_folder.is_symlink() or not (rank_folder / META_FILE).is_file():
        return  # nothing of an earlier run here
    try:
        run_id = orjson.loads((rank_folder / META_FILE).read_bytes()).get("run_id")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        run_id = None
    runs = rank_folder.parent / RUNS_DIR
    target = runs / str(run_id) / rank_folder.name
    if not isinstance(run_id, str) or not _plain_name(run_id) or runs.is_symlink():
        logger.warning("trainpace: %s holds an earlier run that cannot be moved aside (run id "
                       "%r); this run's steps are appended to its files", rank_folder, run_id)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(rank_folder, target)  # fails if the target exists: nothing is overwritten
    except OSError as exc:
        logger.warning("trainpace: could not move the earlier run in %s to %s (%s); this "
                       "run's steps are appended to its files", rank_folder, target,
                       exc.strerror or exc)


def release_claim(folder: Path) -> None:
    """The run in ``folder`` has ended: its claim is given back (the files stay; the next
    process decides by the job's ledger whether it continues the job there)."""
    with contextlib.suppress(OSError):
        (folder / CLAIM_FILE).unlink()


def release_run_folder(folder: Path) -> None:
    """Give back a folder claimed for a run that never started (a sink could not be made)."""
    (folder / CLAIM_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty: never removes anything else


def _claim(folder: Path, *, key_value: Path) -> bool:
    """Make the claim file in ``folder`` (or take over one left by a process that is gone)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / CLAIM_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if folder.exists() and not folder.is_dir():
            if folder == key_value:
                raise ConfigError("out", str(key_value), "must be a folder, but it is a file"
                                  ) from None
            return False  # a file named like the next candidate: skip it
        if not _took_over(folder):
            return False  # claimed by another run
        return _claim(folder, key_value=key_value)
    except OSError as exc:
        raise ConfigError("out", str(key_value),
                          f"cannot be made into a run folder ({exc.strerror or exc})") from exc
    me = this_process()
    try:
        os.write(fd, f"{me.pid} {me.host} {me.start_unix_s}\n".encode())
    except OSError:
        pass  # a full disk: the file made is the claim (what is in it is only a note)
    finally:
        os.close(fd)
    return True


def _took_over(folder: Path) -> bool:
    """Remove a claim whose process is gone (killed: it never gave the folder back). Two
    processes may try at once: the rename lets one of them remove it, and only a claim that
    still names the dead process (not one made meanwhile) is removed."""
    claim = folder / CLAIM_FILE
    owner = _claim_owner(claim)
    if owner is None or running(owner) is not False:
        return False
    private = folder / f"{CLAIM_FILE}.{os.getpid()}"
    try:
        os.rename(claim, private)
    except OSError:
        return False  # another process took it first
    if _claim_owner(private) != owner:  # a live claim made between the read and the rename
        with contextlib.suppress(OSError):
            os.link(private, claim)
        private.unlink(missing_ok=True)
        return False
    private.unlink(missing_ok=True)
    return True


def _claim_owner(claim: Path) -> ProcessId | None:
    """Who a claim file says made it (None: unreadable, or made before claims said)."""
    try:
        words = claim.read_text().split()
        start = None if len(words) < 3 or words[2] == "None" else float(words[2])
        return ProcessId(int(words[0]), words[1], start)
    except (OSError, ValueError, IndexError):
        return None


def _why_not_ours(folder: Path, command: list[str], mode: str | None) -> str | None:
    """None when this run may write ``folder`` (claimed): it is empty, or holds a job this
    run continues (then its latest run is moved into runs/). Else why not, for the warning."""
    if folder.is_symlink():
        # A link planted where others can write would send every file elsewhere.
        return "other files than a trainpace job (a symbolic link)"
    names = set(os.listdir(folder)) - {CLAIM_FILE}
    if not names:
        return None
    last = _last_run(folder / LEDGER_FILE)
    if last is None:
        # An earlier run's files without a ledger, or links planted in a folder others can
        # write to (lines appended through them would land in any file): not a job.
        return "other files than a trainpace job (a run folder starts empty)"
    start, status = last
    if mode == "new":
        return f"a job ({JOB_ENV}=new)"
    if status == FINISHED and mode != "continue":
        return _FINISHED_THERE
    if mode != "continue" and start.get("argv") != command:
        return _ANOTHER_COMMAND
    owner = ProcessId(int(start.get("pid") or 0), str(start.get("host")),
                      start.get("process_start_unix_s"))
    if status is None and running(owner) is not False:
        # (its claim was given back, or it runs on another host sharing the folder)
        return f"a run still going (pid {owner.pid})"
    run_id = str(start.get("run_id"))
    if not _plain_name(run_id):
        return f"a job whose run id {run_id!r} is not a folder name"
    return _move_latest(folder, run_id)


def _last_run(ledger: Path) -> tuple[dict[str, Any], str | None] | None:
    """The job's latest run_start event, and the status its run ended with (None: it has not
    ended, or was killed); None without a ledger."""
    if ledger.is_symlink() or not ledger.is_file():
        return None
    start: dict[str, Any] | None = None
    status: str | None = None
    with contextlib.suppress(OSError), open(ledger, "rb") as lines:
        for line in lines:
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a kill: the events before it stand
            if not isinstance(event, dict) or event.get("schema") != SCHEMA:
                continue
            if event.get("event") == RUN_START:
                start, status = event, None
            elif (event.get("event") == RUN_END and start is not None
                  and event.get("run") == start.get("run")):
                status = str(event.get("status"))
    return None if start is None else (start, status)


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def _move_latest(folder: Path, run_id: str) -> str | None:
    """The latest run's files into runs/<run_id>/ (the same filesystem: renames)."""
    runs = folder / RUNS_DIR
    if runs.is_symlink() or (runs.exists() and not runs.is_dir()):
        return f"a {RUNS_DIR} that is not a folder"
    target = runs / run_id
    # (target may exist: a process that moved the files there, then failed to start its run)
    names = [moved for name in RUN_FILES for moved in (name, f"{name}.tmp")
             if os.path.lexists(folder / moved)]
    if target.is_symlink() or any(os.path.lexists(target / name) for name in names):
        return f"a job whose {RUNS_DIR}/{run_id} holds that run's files already"
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            os.rename(folder / name, target / name)
    except OSError as exc:
        return f"a job that cannot be continued ({exc.strerror or exc})"
    return None
