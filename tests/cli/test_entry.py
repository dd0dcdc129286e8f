"""The ``trainpace`` console script (``trainpace.cli.entry``): every verb ends with the
interpreter's own exit (atexit handlers run), its output whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
HANDMADE = TRACES / "handmade_steps.json"
# the console script, with an atexit handler that says whether the teardown ran
SCRIPT = ("import atexit, sys; atexit.register(lambda: print('teardown', file=sys.stderr)); "
          "from trainpace.cli import entry; entry()")


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True,
                          text=True, check=False, timeout=120)


def test_analyze_ends_with_the_teardown_and_its_output_is_whole() -> None:
    done = _command("analyze", "--json", str(HANDMADE))
    assert done.returncode == 0
    assert json.loads(done.stdout)["ranks"][0]["idle_pct"] == 52.38  # all of it, flushed
    assert done.stderr == "teardown\n"


def test_an_error_of_a_reading_verb_is_said_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("hello")
    done = _command("analyze", str(bad))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"trainpace analyze: error: {bad}: not JSON: it starts "
                                        "with b'hello'", "teardown"]


def test_a_help_ends_with_the_teardown() -> None:
    done = _command("ceilings", "--help")
    assert done.returncode == 0
    assert "teardown" in done.stderr


def test_a_reader_that_goes_away_gets_exit_1_and_no_traceback() -> None:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, "analyze", "--json",
                                str(TRACES / "sampled_rank-0.json.gz")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the analysis prints anything
    code = process.wait(timeout=120)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert code == 1
    assert "Traceback" not in stderr


def test_the_console_script_is_entry() -> None:
    import tomllib

    pyproject = Path(__file__).resolve().parent.parent.parent / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts == {"trainpace": "trainpace.cli:entry"}
