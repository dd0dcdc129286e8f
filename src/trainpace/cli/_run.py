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
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from trainpace.cli._run_end import print_error_to, report_run, run_unmeasured
from trainpace.cli._run_signals import (
    TERM_GRACE_S,
    EndingGuard,
    RunEnding,
    _Terminated,
    die_of,
    exit_status,
    raising_is_safe,
    restore_sigterm,
)

HELP = "run an unmodified training script under the Meter (-- SCRIPT ARGS, or -m MODULE ARGS)"

# Output flags that map to a Meter keyword of the same name: (flag, add_argument settings).
# flags passed through to the Meter keyword of the same name
SINK_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--tensorboard", {"metavar": "DIR", "help": "also write TensorBoard event files to DIR "
                       "(pip install 'trainpace[tensorboard]')"}),
    ("--wandb", {"action": "store_const", "const": True, "help": "also log to W&B (the "
                 "active run, else a new one; pip install 'trainpace[wandb]')"}),
    ("--mlflow", {"nargs": "?", "const": True, "metavar": "URI", "help": "also log to MLflow "
                  "(the active run, or the tracking URI; pip install 'trainpace[mlflow]')"}),
    ("--prometheus", {"type": lambda text: _port(text), "metavar": "PORT",
                      "help": "also serve the window figures to Prometheus on PORT "
                      "(pip install 'trainpace[prometheus]')"}),
    ("--prometheus-host", {"metavar": "HOST",
                           "help": "the exporter's address (default 127.0.0.1)"}),
    # what the run costs (the Meter keywords of the same names)
    ("--price-per-hour", {"type": float, "metavar": "P", "help": "price of one device-hour: "
                          "the run's cost, per million samples and tokens, and to the target"}),
    ("--grid-g-per-kwh", {"type": float, "metavar": "G",
                          "help": "grid carbon intensity (gCO2/kWh) for the CO2 figure"}),
    ("--rated-power-w", {"type": float, "metavar": "W", "help": "a device's rated power, for "
                         "an energy estimate where nothing measured it"}),
)


def _keyword(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _int_at_least(text: str, low: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(
            f"must be {'at least 1' if low == 1 else f'{low} or more'}, got {value}")
    return value


def _port(text: str) -> int:
    value = _int_at_least(text, 1, "a TCP port")
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535, got {value}")
    return value


def _positive(text: str) -> int:
    return _int_at_least(text, 1, "a whole number")


def _warmup(text: str) -> int | str:
    return "auto" if text == "auto" else _int_at_least(text, 0, "N or 'auto'")


def _steps_range(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    try:
        first, last = int(start), int(stop)
    except ValueError:
        first = last = 0
    if not sep or first < 1 or last <= first:
        raise argparse.ArgumentTypeError(f"expected START:STOP with 1 <= START < STOP, got "
                                         f"{text!r}")
    return first, last


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's flags; everything after the script (or -m MODULE) is the script's."""
    parser.add_argument("--out", metavar="DIR",
                        help="run folder to write (default: runs/<script name>; never "
                             "overwritten)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout (the script's "
                             "stdout then goes to stderr)")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report to FILE")
    parser.add_argument("--quiet", action="store_true",
                        help="show nothing until the report (no live panel, no window lines)")
    parser.add_argument("--all-ranks", action="store_true",
                        help="under torchrun, every rank shows its own window lines and report "
                             "(default: rank 0 shows the job's, the others nothing)")
    parser.add_argument("--window", type=_positive, default=100, metavar="N",
                        help="steps per window: the live view's refresh (default: 100)")
    parser.add_argument("--warmup", type=_warmup, default="auto", metavar="N|auto",
                        help="steps left out of the steady figures (default: auto)")
    parser.add_argument("--target-loss", type=_number, metavar="X",
                        help="time the run to the smoothed loss reaching X (and show an ETA)")
    parser.add_argument("--profile", type=_steps_range, metavar="START:STOP",
                        help="record and analyze a profiler trace of steps START..STOP")
    parser.add_argument("--samples-per-step", type=_positive, metavar="N",
                        help="samples in one optimizer step (for a script without DataLoader)")
    parser.add_argument("--tokens-per-step", type=_positive, metavar="N",
                        help="tokens in one optimizer step (for a script without DataLoader)")
    for flag, settings in SINK_FLAGS:
        parser.add_argument(flag, **settings)
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                        help="run a module as `python -m MODULE` does (the rest: its args)")
    parser.add_argument("script", nargs=argparse.REMAINDER, metavar="-- SCRIPT ...",
                        help="the script and its arguments (an interpreter before it, as in "
                             "-- python train.py, is taken as python would)")
    _one_line_errors(parser)


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors of this verb on one line (the usage is long; --help shows it)."""
    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parse_known = parser.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = parse_known(args, namespace)
        if extras:  # an unknown option before the script: ours, not the script's
            error(f"unrecognized option {' '.join(extras)}; the script's own options go "
                  "after the script")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _target(args: argparse.Namespace) -> Any:
    from trainpace.integrations._script import target_of

    if args.module is not None:
        return target_of(["-m", *args.module])
    rest = list(args.script)
    if rest and rest[0] == "--":
        rest = rest[1:]
    return target_of(rest)  # SCRIPT, -m MODULE, or either after python


def run(args: argparse.Namespace) -> int:
    """Check the script, run it metered, print the report, return the script's exit code."""
    from trainpace.errors import TargetError
    from trainpace.integrations._script import check_target

    try:
        target = _target(args)
        check_target(target)
        _check_html(args.html)
    except TargetError as exc:
        code = 2 if exc.usage else 1
        print(f"trainpace run: error: {exc}", file=sys.stderr)
        if args.json:
            from trainpace.cli._output import print_error_json

            print_error_json("run", str(exc), code)
        return code
    _import_run_path()
    from trainpace.integrations.autopatch import AutoPatch

    stem = Path(target.name).stem if target.path is not None else target.name
    out = Path(args.out) if args.out else Path("runs") / stem
    samples, tokens = AutoPatch.counters(args.samples_per_step, args.tokens_per_step)
    saved_stdout = _stdout_to_stderr() if args.json else None
    try:
        return _metered(args, target, out, samples, tokens, saved_stdout)
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


def _check_html(html: str | None) -> None:
    """A ``--html`` path that cannot be written is refused before the script starts."""
    from trainpace.errors import TargetError

    if html is None:
        return
    path = Path(html)
    existed = path.exists()
    try:  # a real attempt: permissions, a read-only mount, a path under a file
        with open(path, "a"):
            pass
    except OSError as exc:
        raise TargetError(f"--html {html}: cannot be written ({exc.strerror or exc}); give "
                          "a file path that can be written", usage=True) from None
    if not existed:
        path.unlink()


def _metered(args: argparse.Namespace, target: Any, out: Path, samples: Any, tokens: Any,
             saved_stdout: int | None) -> int:
    import trainpace
    from trainpace.dist.ranks import rank_info
    from trainpace.errors import TrainpaceError
    from trainpace.integrations._script import run_target
    from trainpace.integrations.autopatch import AutoPatch
    from trainpace.report.live import LiveView

    info = rank_info()
    shows = _what_this_rank_shows(info, args.all_ranks)
    live = None
    if not args.quiet and shows != "nothing":
        title = {"run": target.name, "job": f"{target.name} · job of {info.world_size} ranks",
                 "rank": f"{target.name} · rank {info.rank}"}[shows]
        live = LiveView(sys.stderr, title=title, redirect_stdout=sys.stdout.isatty(),
                        counts_known=lambda: patch.saw_batches or samples is not None)
    extra = {_keyword(flag): getattr(args, _keyword(flag)) for flag, _ in SINK_FLAGS
             if getattr(args, _keyword(flag)) is not None}
    try:
        meter = trainpace.Meter(
            out=out, window=args.window, warmup=args.warmup, target_loss=args.target_loss,
            profile_steps=args.profile, console=False, report=False,
            sinks=_view_sinks(live, shows), samples=samples, tokens=tokens,
            stream=sys.stderr, made_by="run", **extra)
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
    terminated = threading.Event()
    outcome: list[BaseException | None] = []

    def end_run() -> None:
        if live is not None:
            live.close()  # (the watchdog's end: the panel is still up)
        report_run(args, target, meter, patch, outcome, saved_stdout, shows)

    ending = RunEnding(end_run)

    def watchdog() -> None:
        # The script swallowed the SIGTERM exception and trains on: end it from here.
        if not ending_started.wait(TERM_GRACE_S):
            outcome.append(_Terminated())
            ending()
            die_of(signal.SIGTERM)

    ending_started = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main_pid:  # a forked DataLoader worker: die as it would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
        terminated.set()
        # Python without trainpace would be dead by now, silently. The DataLoader workers,
        # sent the same SIGTERM by a scheduler, are dying: PyTorch's SIGCHLD handler would
        # raise for each in the finalizer that joins them, which prints "Exception ignored".
        if hasattr(signal, "SIGCHLD"):
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.unraisablehook = lambda unraisable: None
        # Likewise multiprocessing's own threads (the resource sharer of the workers' file
        # descriptors) fail as the workers die: silent too, as the process would have been.
        threading.excepthook = lambda args: None
        threading.Thread(target=watchdog, name="trainpace-sigterm", daemon=True).start()
        if raising_is_safe(frame):
            raise _Terminated
        # Else the watchdog ends the run: an exception raised in a finalizer or inside
        # multiprocessing (DataLoader workers shutting down) is printed, not raised.

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    failure: BaseException | None = None
    rerouted: list[tuple[logging.StreamHandler[Any], Any]] = []
    if live is not None:
        stderr = sys.stderr
        live.start()
        rerouted = _reroute_logging(stderr, sys.stderr)
    try:
        with patch:
            run_target(target)
    except BaseException as exc:  # noqa: BLE001 - the script's outcome, re-created below
        failure = exc
    finally:
        ending_started.set()
        if live is not None:
            live.close()
        for handler, stream in rerouted:
            handler.setStream(stream)
    # From here on a SIGTERM (torchrun stopping the job after another rank failed) or Ctrl-C
    # waits for the report, at most END_AFTER_SIGNAL_S.
    guard = EndingGuard(hurry=meter._hurry, main_pid=main_pid)
    if terminated.is_set() and not isinstance(failure, _Terminated):
        # Swallowed, or another error raised while unwinding from it: Python without
        # trainpace would have died of the signal, silently.
        failure = _Terminated()
    outcome.append(failure)
    code, kill_with = exit_status(failure)  # its traceback first, then the report
    ending()
    late = guard.close()
    if not terminated.is_set():
        restore_sigterm(previous)
    if kill_with is None and late is not None:
        kill_with = late  # the signal takes its course, now that the report is out
    if kill_with is not None:
        # Ctrl-C or SIGTERM: end as Python would have (killed by the signal), now that the
        # report is out.
        if kill_with == signal.SIGINT:
            atexit._run_exitfuncs()  # Python runs them before it ends itself with SIGINT
        die_of(kill_with)
    return code


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


def _view_sinks(live: Any, shows: str) -> list[Any]:
    if live is None:
        return []
    return [_JobView(live) if shows == "job" else live]


def _what_this_rank_shows(info: Any, all_ranks: bool) -> str:
    """``run`` (one process), ``job`` (rank 0 of a job: the job's figures), ``rank`` (another
    rank under --all-ranks: its own) or ``nothing`` (another rank)."""
    if not info.distributed:
        return "run"
    if info.rank == 0:
        return "job"
    return "rank" if all_ranks else "nothing"


def _reroute_logging(old: Any, new: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """Warnings logged to stderr go above the live panel too (not through it)."""
    if new is old:
        return []
    return [(handler, handler.setStream(new)) for handler in logging.getLogger().handlers
            if isinstance(handler, logging.StreamHandler) and handler.stream is old]


def _stdout_to_stderr() -> int:
    """Send fd 1 to stderr (the script's prints, its subprocesses'); returns the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved
