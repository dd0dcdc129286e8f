"""Fuzzing every verb's command line: any argv ends with exit 0, 1 or 2 and no traceback
(issue 26). The reading verbs run whole; the verbs that would train, measure or run a script
are parsed only (a command line they accept would start real work)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fuzz.conftest import FUZZ, captured
from trainpace.cli import VERBS, build_parser, main

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "handmade_steps.json"
READING = ("report", "compare", "analyze")
VALUES = ["nan", "inf", "-inf", "-1", "0", "1", "2.5", "100000", "1e400", "x", "", "-", "--",
          "a=b", "data_wait_warning_pct=5", "=", "[/]", "exp[lr=0.001]", "\x1b[2J", "\u202e",
          "run", "trace.json", "missing", "/dev/null", "out.html", "cpu", "float32"]


def _flags(verb: str) -> list[str]:
    parser = build_parser(verb)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [s for a in sub.choices[verb]._actions for s in a.option_strings]


FLAGS = {verb: _flags(verb) for verb in VERBS}


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    verb = draw(st.sampled_from(sorted(VERBS)))
    words = st.one_of(st.sampled_from(FLAGS[verb]), st.sampled_from(VALUES), st.text(max_size=8))
    return [verb, *draw(st.lists(words, max_size=6))]


def _exit_code(argv: list[str], *, run: bool) -> tuple[int, str]:
    with captured() as (_, err):
        try:
            if run:
                code = main(argv)
            else:
                build_parser(argv[0]).parse_args(argv)
                code = 0
        except SystemExit as exc:  # argparse: usage (2), --help or --version (0)
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


@FUZZ
@given(command_lines())
def test_any_command_line_ends_with_0_1_or_2(argv):
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        run = Path("run")
        run.mkdir()
        (run / "meta.json").write_text(json.dumps({"schema": "trainpace.meta/1"}))
        (run / "steps.jsonl").write_text("".join(
            json.dumps({"step": i, "t_s": 0.1 * i, "step_s": 0.1, "samples": 4}) + "\n"
            for i in range(1, 30)))
        shutil.copy(TRACE, "trace.json")
        code, err = _exit_code(argv, run=argv[0] in READING)
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err
    if code in (1, 2):
        assert err.strip().splitlines()[-1].startswith("trainpace"), err
