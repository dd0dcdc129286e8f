"""Names from files reach the terminal as text: no control character acts, no markup is
parsed (issue 26), end to end through report, compare and analyze."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from report.folders import steps, write_run
from trainpace.cli import main
from trainpace.report._text import safe_text
from trainpace.summary import Summary, Throughput

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"

# (the hostile name, what must be shown instead)
HOSTILE = [
    ("run\x1b]0;pwned\x07", "run\\x1b]0;pwned\\x07"),  # retitles the terminal
    ("run\x1b[2J\x1b[H", "run\\x1b[2J\\x1b[H"),  # clears the screen
    ("bell\x07", "bell\\x07"),
    ("evil\u202etxt.exe", "evil\\u202etxt.exe"),  # right-to-left override
    ("[link=https://evil.example]click[/link]", "[link=https://evil.example]click[/link]"),
    ("exp[lr=0.001]", "exp[lr=0.001]"),
    ("a[/]b", "a[/]b"),  # a closing tag with nothing open: rich raises
]
RAW = ("\x1b", "\x07", "\u202e")


def _assert_shown(text: str, shown: str) -> None:
    assert shown in text
    for raw in RAW:
        assert raw not in text


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_report_shows_a_hostile_run_id_as_text(tmp_path, capsys, name, shown):
    run = write_run(tmp_path / "run", steps(20, step_s=0.1, samples=8),
                    meta={"run_id": name}, summary=None)
    assert main(["report", str(run)]) == 0
    _assert_shown(" ".join(capsys.readouterr().out.split()), shown)


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_compare_shows_hostile_run_ids_as_text(tmp_path, capsys, name, shown):
    a = write_run(tmp_path / "a", steps(20, step_s=0.1, samples=8), meta={"run_id": name})
    b = write_run(tmp_path / "b", steps(20, step_s=0.2, samples=8), meta={"run_id": name})
    assert main(["compare", str(a), str(b)]) == 0
    _assert_shown(capsys.readouterr().out, shown)


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_analyze_shows_hostile_kernel_names_as_text(tmp_path, capsys, name, shown):
    doc = json.loads((TRACES / "handmade_steps.json").read_text())
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = name
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(doc))
    assert main(["analyze", str(trace)]) == 0
    _assert_shown(capsys.readouterr().out, shown)


def test_an_error_naming_a_hostile_path_is_escaped(tmp_path, capsys):
    assert main(["report", str(tmp_path / "no\x1b[2Jsuch")]) == 1
    err = capsys.readouterr().err
    assert "no\\x1b[2Jsuch: no such folder" in err and "\x1b" not in err


def test_nan_in_a_summary_is_unknown_never_nan_ok(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps(20, step_s=0.1, samples=8))
    data = Summary(run_id="run", throughput=Throughput(samples_per_s=1.0)).to_dict()
    data["steps"] = {"total": 20, "warmup": 0, "measured": 20}
    text = json.dumps(data).replace('"samples_per_s": 1.0', '"samples_per_s": NaN')
    (run / "summary.json").write_text(text)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower()
    assert "○ throughput" in " ".join(out.split())  # not measured, never "● ok"


def test_safe_text_escapes_controls_and_keeps_text():
    assert safe_text("a\tb\nc\x7f\x9b\u2066d é 中") == "a\\x09b\\x0ac\\x7f\\x9b\\u2066d é 中"


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_the_live_panel_shows_a_hostile_title_and_run_id_as_text(name, shown):
    import io

    from rich.console import Console

    from trainpace.report.live import LiveView
    from trainpace.runlog import Record

    view = LiveView(io.StringIO(), terminal=True, title=name)
    view.log(Record("summary", Summary(run_id=name).to_dict()))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(view.renderable())
    _assert_shown(out.getvalue(), shown)
