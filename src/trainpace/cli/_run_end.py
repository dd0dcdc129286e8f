"""The end of ``trainpace run``: the summary with what the patches could not see, the report,
the HTML page, and no run folder left by a script that failed before it trained."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any

from trainpace.cli._run_signals import _Terminated, die_of, exit_status


def run_unmeasured(target: Any) -> int:
    from trainpace.integrations._script import run_target

    try:
        run_target(target)
    except BaseException as exc:  # noqa: BLE001 - the script's outcome, re-created below
        code, kill_with = exit_status(exc)
        if kill_with is not None:
            die_of(kill_with)
        return code
    return 0



def report_run(args: argparse.Namespace, target: Any, meter: Any, patch: Any,
               outcome: list[BaseException | None], saved_stdout: int | None,
               shows: str = "run") -> None:
    """Finish the run and print its report (or, when the script ended in failure before
    anything was trained, leave no run folder: a usage error is not a run).

    ``shows``: ``"run"`` (one process: its own report), ``"job"`` (rank 0 of a torchrun job:
    the job's merged report and folder), ``"rank"`` (another rank under ``--all-ranks``: its
    own) or ``"nothing"`` (another rank: it finishes its folder and says nothing)."""
    failure = outcome[0]
    sys.stdout.flush()
    meter._end_as(*ledger_end(failure))
    summary = _finished(meter, patch)
    ledger = meter._job_ledger
    if not patch.trained and _failed(failure) and (ledger is None or ledger.run == 1):
        # (a restart that failed so is kept: its time is the job's)
        _discard(meter.path)
        if args.json and shows != "nothing":  # --json prints one object, also untrained
            print_error_to(saved_stdout, *_nothing_trained(failure))
        return
    if shows == "nothing":
        return
    path = meter.path
    if shows == "job" and meter.job_summary is not None:
        summary, path = _with_blind_spots(meter.job_summary, patch), meter.job_path
    from rich.markup import escape

    from trainpace.report.console import print_report

    print_report(summary, file=sys.stderr, title=escape(f"trainpace run {target.name} · {path}"))
    if args.html and meter.path is not None and shows != "rank":  # one page: the job's
        try:
            _write_html(summary, meter.path, args.html)
        except OSError as exc:  # said, and the script's exit status kept
            print(f"trainpace run: cannot write the HTML report {args.html} "
                  f"({exc.strerror or exc})", file=sys.stderr)
    if args.json:
        _print_json_to(saved_stdout, summary.to_dict())
    else:
        print(f"run folder: {path}  (see it again: trainpace report {path})", file=sys.stderr)


def _print_json_to(saved_stdout: int | None, obj: Any) -> None:
    """The one JSON object, on the real stdout (fd 1 went to stderr while the script ran)."""
    from trainpace.cli._output import print_json

    sys.stdout.flush()
    if saved_stdout is not None:
        os.dup2(saved_stdout, 1)
    print_json(obj)


def print_error_to(saved_stdout: int | None, message: str, code: int) -> None:
    """``--json``'s one object for a run without a summary, on the real stdout."""
    from trainpace.cli._output import error_object

    _print_json_to(saved_stdout, error_object("run", message, code))


def _nothing_trained(failure: BaseException | None) -> tuple[str, int]:
    """What ``--json`` says of a script that failed before its first step: no summary (no
    run folder is left), the script's exit status."""
    code = _status_of(failure)
    return ("the script ended before its first optimizer step (exit status "
            f"{code}); nothing was measured and no run folder was kept"), code


def _status_of(failure: BaseException | None) -> int:
    """The script's exit status as the shell sees it (:func:`exit_status` without its output:
    the traceback is already printed)."""
    if isinstance(failure, SystemExit):
        code = failure.code
        return 0 if code is None else code if isinstance(code, int) else 1
    if isinstance(failure, _Terminated):
        return 128 + signal.SIGTERM
    if isinstance(failure, KeyboardInterrupt):
        return 128 + signal.SIGINT
    return 0 if failure is None else 1


def ledger_end(failure: BaseException | None) -> tuple[str, str | None]:
    """The job ledger's run_end (status, signal) of the script's outcome."""
    from trainpace.job.events import FAILED, FINISHED, INTERRUPTED

    if isinstance(failure, _Terminated):
        return INTERRUPTED, "SIGTERM"
    if isinstance(failure, KeyboardInterrupt):
        return INTERRUPTED, "SIGINT"
    return (FAILED, None) if _failed(failure) else (FINISHED, None)


def _failed(failure: BaseException | None) -> bool:
    if failure is None:
        return False
    if isinstance(failure, SystemExit):
        return failure.code not in (None, 0)
    return True



def _discard(path: Path | None) -> None:
    """Remove the files trainpace wrote for a run that never trained, and the folder if it
    is then empty (nothing else in it is touched)."""
    from trainpace.job.events import LEDGER_FILE
    from trainpace.runlog import META_FILE, PROFILE_FILE, STEPS_FILE, SUMMARY_FILE, SYSTEM_FILE
    from trainpace.sinks.folder_claim import release_run_folder
    from trainpace.sinks.ledger import PROGRESS_FILE

    if path is None:
        return
    for name in (META_FILE, STEPS_FILE, SYSTEM_FILE, SUMMARY_FILE, PROFILE_FILE, LEDGER_FILE,
                 PROGRESS_FILE):
        for file in (path / name, path / f"{name}.tmp"):
            with contextlib.suppress(OSError):
                file.unlink()
    release_run_folder(path)



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
    summary = _with_blind_spots(summary, patch)
    if meter.path is not None:
        sink = RunFolderSink(meter.path)
        sink.log(Record("summary", summary.to_dict(), summary.steps.total))
        sink.close()
    return summary



def _with_blind_spots(summary: Any, patch: Any) -> Any:
    """The summary with what the patches could not see first among its findings."""
    blind = patch.blind_spots()
    if not blind:
        return summary
    diagnosis = dataclasses.replace(summary.diagnosis,
                                    findings=[*blind, *summary.diagnosis.findings])
    return dataclasses.replace(summary, diagnosis=diagnosis)


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
