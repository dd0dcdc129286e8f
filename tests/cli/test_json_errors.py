"""``--json`` on every verb prints exactly one JSON object on stdout, also when the verb ends in
a usage error (exit 2) or its own error (exit 1): ``{"error": {...}}`` (issue 26)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainpace
from trainpace.cli import VERBS, main

SCRIPT = "print('trained')\n"


def _one_object(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors leave this way (status 2)
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capfd.readouterr()
    return code, json.loads(out), err  # json.loads: exactly one object, nothing around it


# One usage error and one own error of every verb (each own error fails before any real work).
CASES = [
    (["demo", "--json", "--steps", "x"], 2, "argument --steps: invalid int value: 'x'"),
    (["demo", "--json", "--steps", "1", "--out", "{file}/x"], 1,
     "out cannot be made into a run folder (Not a directory)"),
    (["run", "--json", "--window", "0", "{script}"], 2, "argument --window: must be at least 1"),
    (["run", "--json", "--quiet", "--bogus", "{script}"], 2, "unrecognized option --bogus"),
    (["run", "--json", "{tmp}/missing.py"], 2, "missing.py: no such file"),
    (["run", "--json", "--quiet", "--out", "{file}/x", "{script}"], 1,
     "out cannot be made into a run folder (Not a directory)"),
    (["report", "--json"], 2, "the following arguments are required: RUN"),
    (["report", "--json", "{tmp}/missing"], 1, "missing: no such folder"),
    (["compare", "--json", "{tmp}"], 2, "the following arguments are required: RUN_B"),
    (["compare", "--json", "{tmp}/a", "{tmp}/b"], 1, "a: no such folder"),
    (["analyze", "--json", "--top", "0", "t.json"], 2, "argument --top: must be > 0, got 0"),
    (["analyze", "--json", "{tmp}/missing.json"], 1, "missing.json: no such file"),
    (["ceilings", "--json", "--threads", "0"], 2, "argument --threads: must be >= 1, got 0"),
    (["ceilings", "--json", "--cached", "--device", "cpu"], 1, "no ceilings cached at"),
    (["tune-loader", "--json", "--budget-s"], 2, "argument --budget-s: expected one argument"),
    (["tune-loader", "--json", "no_such_module_here:make"], 1,
     "cannot import 'no_such_module_here'"),
    (["report", "--json", "run\x00"], 2, "an argument holds a NUL byte"),
]


def test_every_verb_is_in_the_table():
    assert {argv[0] for argv, _, _ in CASES} == set(VERBS)
    assert {(argv[0], code) for argv, code, _ in CASES} == {(v, c) for v in VERBS for c in (1, 2)}



@pytest.mark.parametrize(("argv", "code", "said"), CASES)
def test_json_errors_are_one_object_with_the_exit_code(argv, code, said, tmp_path, monkeypatch,
                                                       capfd):
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path / "cache"))  # empty: nothing cached
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    (tmp_path / "train.py").write_text(SCRIPT)
    names = {"tmp": tmp_path, "file": tmp_path / "file", "script": tmp_path / "train.py"}
    got, answer, err = _one_object([part.format(**names) for part in argv], capfd)
    assert got == code
    assert set(answer) == {"error"}
    error = answer["error"]
    assert error["verb"] == argv[0]
    assert error["exit_code"] == code
    assert error["usage"] is (code == 2)
    assert said in error["message"]
    assert not error["message"].startswith("trainpace")  # the line, without its prefix
    assert f": error: {error['message']}" in err  # and said on stderr


def test_without_json_a_usage_error_prints_nothing_on_stdout(capfd):
    with pytest.raises(SystemExit) as exited:
        main(["report"])
    assert exited.value.code == 2
    assert capfd.readouterr().out == ""


@pytest.mark.parametrize("argv", [
    ["run", "--out", "x", "{script}", "--json", "--bogus"],  # the script's own arguments
    ["run", "--out", "x", "--", "{script}", "--json"],
])
def test_run_a_json_after_the_script_is_the_scripts(argv, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import sys; print(sys.argv[1:])\n")
    code = main([part.format(script=tmp_path / "train.py") for part in argv] + ["--quiet"])
    out, _ = capfd.readouterr()
    assert code == 0
    assert "'--json'" in out and not out.lstrip().startswith("{")


# The Meter of a full disk: made in a real process (the script's stdout is fd 1, sent to stderr).
FULL_DISK = """
import errno, sys
import trainpace
from trainpace.cli import main

def full_disk(**settings):
    raise OSError(errno.ENOSPC, "No space left on device", str(settings["out"]))

trainpace.Meter = full_disk
sys.exit(main(sys.argv[1:]))
"""


def test_run_whose_meter_cannot_write_runs_the_script_and_says_so_as_json(tmp_path):
    """A full disk when the Meter is made: the script runs unmeasured, its exit status kept,
    and --json's one object says why there is no summary."""
    script = tmp_path / "train.py"
    script.write_text("print('trained'); raise SystemExit(3)\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, "run", "--json", "--quiet",
                           "--out", str(out), str(script)],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout) == {"error": {
        "verb": "run", "exit_code": 3, "usage": False,
        "message": f"cannot write the run folder at {out} (No space left on device); the "
                   "script runs without being measured"}}
    assert "trained" in done.stderr  # the script's stdout goes to stderr under --json
    assert not out.exists()


def _env() -> dict[str, str]:
    environ = dict(os.environ)
    source = str(Path(trainpace.__file__).resolve().parents[1])
    environ["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [environ.get("PYTHONPATH")])])
    return environ
