"""Bad usage of every reading verb: one line, the verb named, the help pointed at, exit 2;
numbers that are not finite refused (issue 26)."""

from __future__ import annotations

import pytest

from trainpace.cli import main
from trainpace.cli._args import cpu_cores


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(("argv", "line"), [
    (["report"], "trainpace report: error: the following arguments are required: RUN "
                 "(see `trainpace report --help`)"),
    (["report", "r", "--bogus"], "trainpace report: error: unrecognized arguments: --bogus "
                                 "(see `trainpace report --help`)"),
    (["compare", "a"], "trainpace compare: error: the following arguments are required: RUN_B "
                       "(see `trainpace compare --help`)"),
    (["analyze", "t", "--top", "x"], "trainpace analyze: error: argument --top: expected an "
                                     "integer, got 'x' (see `trainpace analyze --help`)"),
    (["nosuchverb"], "trainpace: error: argument VERB: invalid choice: 'nosuchverb' (choose from "
                     "'demo', 'run', 'report', 'compare', 'analyze', 'ceilings', 'tune-loader') "
                     "(see `trainpace --help`)"),
])
def test_a_usage_error_is_one_line_with_the_fix(argv, line, capsys):
    assert _usage_error(argv, capsys) == line


@pytest.mark.parametrize(("argv", "said"), [
    (["report", "r", "--threshold", "data_wait_warning_pct=nan"],
     "argument --threshold: must be a finite number, got 'nan'"),
    (["report", "r", "--price-per-hour", "inf"],
     "argument --price-per-hour: must be a finite number, got 'inf'"),
    (["analyze", "t", "--gap-us", "nan"], "argument --gap-us: must be a finite number, got 'nan'"),
    (["analyze", "t", "--gap-us", "0"], "argument --gap-us: must be > 0, got 0"),
    (["compare", "a", "b", "--price-per-hour", "nan"],
     "argument --price-per-hour: must be a finite number (a price per device-hour), got 'nan'"),
    (["run", "--target-loss", "nan", "--", "t.py"],
     "argument --target-loss: must be a finite number, got 'nan'"),
    (["run", "--rated-power-w", "inf", "--", "t.py"],
     "argument --rated-power-w: must be a finite number, got 'inf'"),
    (["run", "--grid-g-per-kwh", "nan", "--", "t.py"],
     "argument --grid-g-per-kwh: must be a finite number, got 'nan'"),
    (["run", "--price-per-hour", "nan", "--", "t.py"],
     "argument --price-per-hour: must be a finite number (a price per device-hour), got 'nan'"),
])
def test_numbers_that_are_not_finite_are_refused(argv, said, capsys):
    assert said in _usage_error(argv, capsys)


def test_ceilings_threads_are_bounded_by_the_cores(capsys):
    line = _usage_error(["ceilings", "--threads", "100000"], capsys)
    assert f"argument --threads: must be <= {cpu_cores()} (the CPU cores available)" in line
