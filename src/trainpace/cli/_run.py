"""``trainpace run [OPTIONS] -- SCRIPT [ARGS...]`` / ``-m MODULE [ARGS...]``: an unmodified
script, metered (``-- python SCRIPT`` and ``-- python -m MODULE`` are taken too, as launchers'
users type them).

The script runs as ``__main__`` (its own ``sys.argv``, ``sys.path[0]``, output and exit code)
under a :class:`~trainpace.Meter` driven by :class:`~trainpace.integrations.autopatch.AutoPatch`.
At the end (also after an exception, ``sys.exit``, Ctrl-C or SIGTERM) the report is printed
and the run folder is complete; the exit code is the script's.

Under torchrun each rank runs this; rank 0 shows the job (the window lines with the job's
figures, the merged report, the job's folder) and the other ranks show nothing of trainpace's
unless ``--all-ranks``. A SIGTERM or Ctrl-C that comes while the report is being made waits
for it (at most ``END_AFTER_SIGNAL_S``), then ends the process as the signal would have.

This module is the run's lifetime; its parts: :mod:`._run_args` (the flags, the script they
name), :mod:`._run_view` (what shows while the script runs), :mod:`._run_signals` (ending as
the script would have) and :mod:`._run_end` (the summary and the report).
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from pathlib import Path
from typing import Any

from trainpace.cli._run_args import add_arguments, meter_settings, run_folder, script_of
from trainpace.cli._run_end import print_error_to, report_run, run_unmeasured
from trainpace.cli._run_signals import (
    EndingGuard,
    RunEnding,
    TermDuringScript,
    _Terminated,
    die_of,
    exit_status,
)
from trainpace.cli._run_view import live_view, reroute_logging, view_sinks, what_this_rank_shows

__all__ = ["HELP", "add_arguments", "run"]

HELP = "run an unmodified training script under the Meter (-- SCRIPT ARGS, or -m MODULE ARGS)"


def run(args: argparse.Namespace) -> int:
    """Check the script, run it metered, print the report, return the script's exit code."""
    from trainpace.errors import TargetError

    try:
        target = script_of(args)
    except TargetError as exc:
        code = 2 if exc.usage else 1
        print(f"trainpace run: error: {exc}", file=sys.stderr)
        if args.json:
            from trainpace.cli._output import print_error_json

            print_error_json("run", str(exc), code)
        return code
    _import_run_path()
    from trainpace.integrations.autopatch import AutoPatch

    samples, tokens = AutoPatch.counters(args.samples_per_step, args.tokens_per_step)
    saved_stdout = _stdout_to_stderr() if args.json else None
    try:
        return _metered(args, target, run_folder(args, target), samples, tokens, saved_stdout)
    finally:
        if saved_stdout is not None:
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)


def _import_run_path() -> None:
    """Import what the run needs before the script starts, after torch (which the script
    would import anyway), with torch's objects left out of the garbage collections.

    Each full collection that trainpace's imports set off would walk every object torch
    made (about 180,000): 40% of these imports' CPU time, 0.06-0.1 s per run. Objects made
    before ``gc.freeze()`` are not walked until ``gc.unfreeze()``, which follows at once: the
    script runs with the collector as Python left it (skipped if something froze objects
    before us, whose freeze is not ours to undo).
    """
    import gc

    import torch  # noqa: F401 - first, so that its objects are the ones frozen

    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()
    try:
        import trainpace.integrations.autopatch
        import trainpace.meter.facade
        import trainpace.report.live  # noqa: F401
    finally:
        if freezing:
            gc.unfreeze()


def _metered(args: argparse.Namespace, target: Any, out: Path, samples: Any, tokens: Any,
             saved_stdout: int | None) -> int:
    import trainpace
    from trainpace.dist.ranks import rank_info
    from trainpace.errors import TrainpaceError
    from trainpace.integrations._script import run_target
    from trainpace.integrations.autopatch import AutoPatch

    info = rank_info()
    shows = what_this_rank_shows(info, args.all_ranks)
    live = live_view(target.name, info, shows, quiet=args.quiet,
                     counts_known=lambda: patch.saw_batches or samples is not None)
    try:
        meter = trainpace.Meter(
            out=out, **meter_settings(args), console=False, report=False,
            sinks=view_sinks(live, shows), samples=samples, tokens=tokens,
            stream=sys.stderr, made_by="run")
    except TrainpaceError:
        raise  # a bad setting or output path: said before the script starts
    except OSError as exc:  # the disk, not the user: the training runs, unmeasured
        where = exc.filename or out
        said = (f"cannot write the run folder at {where} ({exc.strerror or exc}); the script "
                "runs without being measured")
        print(f"trainpace run: warning: {said}", file=sys.stderr)
        code = run_unmeasured(target)
        if saved_stdout is not None:  # --json: the one object says why there is no summary
            print_error_to(saved_stdout, said, code)
        return code
    meter._leave_signals()  # `run` owns its process's signals (below), not the Meter
    patch = AutoPatch(meter, samples=samples, tokens=tokens)
    main_pid = os.getpid()
    outcome: list[BaseException | None] = []

    def end_run() -> None:
        if live is not None:
            live.close()  # (the watchdog's end: the panel is still up)
        report_run(args, target, meter, patch, outcome, saved_stdout, shows)

    ending = RunEnding(end_run)
    term = TermDuringScript(ending, outcome, main_pid=main_pid)
    failure: BaseException | None = None
    rerouted: list[tuple[Any, Any]] = []
    if live is not None:
        stderr = sys.stderr
        live.start()
        rerouted = reroute_logging(stderr, sys.stderr)
    try:
        with patch:
            run_target(target)
    except BaseException as exc:  # noqa: BLE001 - the script's outcome, re-created below
        failure = exc
    finally:
        term.script_done()
        if live is not None:
            live.close()
        for handler, stream in rerouted:
            handler.setStream(stream)
    # From here on a SIGTERM (torchrun stopping the job after another rank failed) or Ctrl-C
    # waits for the report, at most END_AFTER_SIGNAL_S.
    guard = EndingGuard(hurry=meter._hurry, main_pid=main_pid)
    if term.terminated.is_set() and not isinstance(failure, _Terminated):
        # Swallowed, or another error raised while unwinding from it: Python without
        # trainpace would have died of the signal, silently.
        failure = _Terminated()
    outcome.append(failure)
    code, kill_with = exit_status(failure)  # its traceback first, then the report
    ending()
    late = guard.close()
    term.restore()
    if kill_with is None and late is not None:
        kill_with = late  # the signal takes its course, now that the report is out
    if kill_with is not None:
        # Ctrl-C or SIGTERM: end as Python would have (killed by the signal), now that the
        # report is out.
        if kill_with == signal.SIGINT:
            atexit._run_exitfuncs()  # Python runs them before it ends itself with SIGINT
        die_of(kill_with)
    return code


def _stdout_to_stderr() -> int:
    """Send fd 1 to stderr (the script's prints, its subprocesses'); returns the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved
