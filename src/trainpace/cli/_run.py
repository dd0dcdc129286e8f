"""``trainpace run [OPTIONS] -- SCRIPT [ARGS...]`` / ``-m MODULE [ARGS...]``: an unmodified
script, metered.

The script runs as ``__main__`` (its own ``sys.argv``, ``sys.path[0]``, output and exit code)
under a :class:`~trainpace.Meter` driven by :class:`~trainpace.integrations.autopatch.AutoPatch`.
At the end (also after an exception, ``sys.exit``, Ctrl-C or SIGTERM) the report is printed
and the run folder is complete; the exit code is the script's.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

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
    ("--prometheus", {"type": int, "metavar": "PORT", "help": "also serve the window figures "
                      "to Prometheus on PORT (pip install 'trainpace[prometheus]')"}),
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
                        help="the script and its arguments")
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


class _Terminated(BaseException):
    """SIGTERM, raised in the script so that it unwinds and the report can be made."""


def _target(args: argparse.Namespace) -> Any:
    from trainpace.integrations._script import Target

    if args.module is not None:
        if not args.module:
            return None
        return Target(module=args.module[0], args=tuple(args.module[1:]))
    rest = list(args.script)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        return None
    if rest[0] == "-m":  # trainpace run -- -m MODULE
        return Target(module=rest[1], args=tuple(rest[2:])) if len(rest) > 1 else None
    return Target(path=rest[0], args=tuple(rest[1:]))


def run(args: argparse.Namespace) -> int:
    """Check the script, run it metered, print the report, return the script's exit code."""
    from trainpace.errors import TargetError
    from trainpace.integrations._script import check_target

    target = _target(args)
    if target is None:
        print("trainpace run: error: no script given; usage: trainpace run [OPTIONS] -- "
              "SCRIPT [ARGS...] or trainpace run [OPTIONS] -m MODULE [ARGS...]",
              file=sys.stderr)
        return 2
    try:
        check_target(target)
    except TargetError as exc:
        print(f"trainpace run: error: {exc}", file=sys.stderr)
        return 2 if exc.usage else 1
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


def _metered(args: argparse.Namespace, target: Any, out: Path, samples: Any, tokens: Any,
             saved_stdout: int | None) -> int:
    import trainpace
    from trainpace.integrations._script import run_target
    from trainpace.integrations.autopatch import AutoPatch
    from trainpace.report.live import LiveView

    live = None
    if not args.quiet:
        live = LiveView(sys.stderr, title=target.name, redirect_stdout=sys.stdout.isatty(),
                        counts_known=lambda: patch.saw_batches or samples is not None)
    extra = {_keyword(flag): getattr(args, _keyword(flag)) for flag, _ in SINK_FLAGS
             if getattr(args, _keyword(flag)) is not None}
    meter = trainpace.Meter(
        out=out, window=args.window, warmup=args.warmup, target_loss=args.target_loss,
        profile_steps=args.profile, console=False, report=False,
        sinks=[live] if live is not None else [], samples=samples, tokens=tokens,
        stream=sys.stderr, **extra)
    patch = AutoPatch(meter, samples=samples, tokens=tokens)
    main_pid = os.getpid()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main_pid:  # a forked DataLoader worker: die as it would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
        raise _Terminated

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
        if live is not None:
            live.close()
        for handler, stream in rerouted:
            handler.setStream(stream)
        _restore_sigterm(previous)
    code, kill_with = _outcome(failure)
    sys.stdout.flush()
    summary = _finished(meter, patch)
    from trainpace.report.console import print_report

    print_report(summary, file=sys.stderr, title=f"trainpace run {target.name} · {meter.path}")
    if args.html and meter.path is not None:
        _write_html(summary, meter.path, args.html)
    if args.json:
        from trainpace.cli._output import print_json

        sys.stdout.flush()
        if saved_stdout is not None:
            os.dup2(saved_stdout, 1)
        print_json(summary.to_dict())
    else:
        print(f"run folder: {meter.path}  (see it again: trainpace report {meter.path})",
              file=sys.stderr)
    if kill_with is not None:
        # Ctrl-C or SIGTERM: end as Python would have (killed by the signal), now that the
        # report is out.
        if kill_with == signal.SIGINT:
            atexit._run_exitfuncs()  # Python runs them before it ends itself with SIGINT
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(kill_with, signal.SIG_DFL)
        os.kill(os.getpid(), kill_with)
    return code


def _reroute_logging(old: Any, new: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """Warnings logged to stderr go above the live panel too (not through it)."""
    if new is old:
        return []
    return [(handler, handler.setStream(new)) for handler in logging.getLogger().handlers
            if isinstance(handler, logging.StreamHandler) and handler.stream is old]


def _restore_sigterm(previous: Any) -> None:
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _outcome(failure: BaseException | None) -> tuple[int, signal.Signals | None]:
    """(exit code, signal to die of): what ``python script.py`` would have given."""
    from trainpace.integrations._script import user_frames

    if failure is None:
        return 0, None
    if isinstance(failure, SystemExit):
        code = failure.code
        if code is None:
            return 0, None
        if isinstance(code, int):
            return code, None
        print(code, file=sys.stderr)
        return 1, None
    if isinstance(failure, _Terminated):
        return 128 + signal.SIGTERM, signal.SIGTERM
    traceback.print_exception(type(failure), failure, user_frames(failure.__traceback__),
                              file=sys.stderr)
    if isinstance(failure, KeyboardInterrupt):
        return 128 + signal.SIGINT, signal.SIGINT
    return 1, None


def _finished(meter: Any, patch: Any) -> Any:
    """The Meter's summary, with unmeasured counts as unknown and what was not seen."""
    from trainpace.runlog import Record
    from trainpace.sinks.runfolder import RunFolderSink

    summary = meter.finish()
    blind = patch.blind_spots()
    if not blind:
        return summary
    if not patch.saw_batches:
        # No batch was counted: the Meter's zeros are "not measured" here.
        summary = dataclasses.replace(
            summary,
            throughput=dataclasses.replace(
                summary.throughput,
                tokens_per_s=summary.throughput.tokens_per_s if patch.tokens_given else None,
                samples_per_s=summary.throughput.samples_per_s if patch.samples_given
                else None),
            data=dataclasses.replace(summary.data, wait_s_per_step=None, wait_pct=None))
        summary = _rediagnosed(summary, meter.path)
    diagnosis = dataclasses.replace(summary.diagnosis,
                                    findings=[*blind, *summary.diagnosis.findings])
    summary = dataclasses.replace(summary, diagnosis=diagnosis)
    if meter.path is not None:
        sink = RunFolderSink(meter.path)
        sink.log(Record("summary", summary.to_dict(), summary.steps.total))
        sink.close()
    return summary


def _rediagnosed(summary: Any, path: Path | None) -> Any:
    from trainpace.diagnosis import diagnose
    from trainpace.runlog import read_run

    if path is None:
        return dataclasses.replace(summary, diagnosis=diagnose(summary))
    folder = read_run(path)
    steps: Any = folder.series  # the diagnosis reads the steps as columns
    return dataclasses.replace(summary, diagnosis=diagnose(
        summary, steps=steps, system=folder.system, meta=folder.meta))


def _write_html(summary: Any, path: Path, html: str) -> None:
    from trainpace.report.html import write_page
    from trainpace.report.run_html import run_page
    from trainpace.runlog import read_run

    folder = read_run(path)
    page = run_page(summary, series=folder.series, system=folder.system, meta=folder.meta,
                    source=str(path), notes=folder.notes)
    print(f"trainpace run: wrote {write_page(html, page)}", file=sys.stderr)


def _stdout_to_stderr() -> int:
    """Send fd 1 to stderr (the script's prints, its subprocesses'); returns the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved
