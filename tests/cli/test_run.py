"""``trainpace run`` as a user runs it: real subprocesses on the ordinary scripts in scripts/."""

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainpace

SCRIPTS = Path(__file__).parent / "scripts"
SRC = str(Path(trainpace.__file__).resolve().parents[1])
MAIN = "import sys; from trainpace.cli import main; sys.exit(main())"


def env():
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [environ.get("PYTHONPATH")])])
    return environ


def command(*args):
    return [sys.executable, "-c", MAIN, "run", *map(str, args)]


def trainpace_run(*args, cwd=SCRIPTS, timeout=120):
    return subprocess.run(command(*args), cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout)


def steps_of(folder):
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def test_a_plain_loop_json_on_stdout_the_scripts_output_on_stderr(tmp_path):
    out = tmp_path / "plain"
    done = trainpace_run("--json", "--quiet", "--window", "10", "--out", out, "--",
                         "plain_loop.py", "--steps", "30", "--print-every", "10")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # exactly one JSON object: the script printed elsewhere
    assert summary["schema"] == "trainpace.summary/1"
    assert summary["steps"]["total"] == 30
    assert summary["throughput"]["samples_per_s"] > 0
    assert summary["data"]["wait_pct"] is not None
    assert summary["diagnosis"]["bottleneck"] is not None
    # The script ran as __main__ with its own argv and sys.path[0].
    assert f"argv ['--steps', '30', '--print-every', '10'] path0 {SCRIPTS} name __main__" \
        in done.stderr
    assert "script: step 30" in done.stderr
    rows = steps_of(out)
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert {r["samples"] for r in rows} == {8}
    assert {r["micro_batches"] for r in rows} == {1}
    assert all(r["loss"] is not None for r in rows)  # the tensor passed to backward()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["finished_at"] is not None
    assert meta["made_by"] == "run"
    assert meta["loader"]["batch_size"] == 8
    assert json.loads((out / "summary.json").read_text())["steps"]["total"] == 30
    assert "--quiet" not in done.stderr and "step 10 |" not in done.stderr  # --quiet
    # meta.json keeps trainpace's command, as the job's ledger does (the script's own argv
    # while it runs is not the job's), so the run is its job's and its time is counted
    [start] = [json.loads(line) for line in (out / "job.jsonl").read_text().splitlines()
               if json.loads(line)["event"] == "run_start"]
    assert meta["argv"][1:] == start["argv"][1:]
    assert meta["argv"][-2:] == ["--print-every", "10"] and "--json" in meta["argv"]
    goodput = summary["goodput"]
    assert goodput["productive_s"] > 0 and goodput["pct"] > 0, goodput
    assert not any("another job" in note for note in goodput.get("notes") or []), goodput


def test_gradient_accumulation_is_inferred_and_evaluation_left_out(tmp_path):
    out = tmp_path / "acc"
    done = trainpace_run("--json", "--out", out, "accumulate.py")
    assert done.returncode == 0, done.stderr
    rows = steps_of(out)
    assert len(rows) == 10
    assert {r["micro_batches"] for r in rows} == {4}  # 4 micro-batches per optimizer step
    assert {r["samples"] for r in rows} == {32}
    assert "script: test loss" in done.stderr


def test_a_batch_fetched_to_read_the_batch_size_and_never_trained_on_is_not_counted(tmp_path):
    out = tmp_path / "peek"
    done = trainpace_run("--json", "--out", out, "peek_batch_size.py")
    assert done.returncode == 0, done.stderr
    rows = steps_of(out)
    assert len(rows) == 15  # 3 epochs of 5 steps
    assert [r["samples"] for r in rows] == [8] * 15
    assert [r["micro_batches"] for r in rows] == [1] * 15
    assert "script: epoch 2 | batch size 8" in done.stderr


def test_without_a_terminal_one_line_per_window_and_the_html_report(tmp_path):
    page = tmp_path / "run.html"
    # steps of 20 ms at least: windows of 10 steps are longer than the 50 ms below which
    # windows share one line (meter.pipeline.SINK_WINDOW_S), whatever the machine's load
    done = trainpace_run("--window", "10", "--out", tmp_path / "lines", "--html", page,
                         "plain_loop.py", "--steps", "30", "--sleep-ms", "20")
    assert done.returncode == 0, done.stderr
    assert page.read_text().lstrip().lower().startswith("<!doctype html")
    assert f"trainpace run: wrote {page}" in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert [line.split(" |")[0] for line in lines] == ["step 10", "step 20", "step 30"]
    assert all("samples/s" in line for line in lines[1:])
    assert "bottleneck" in done.stderr  # then the report


def test_a_script_that_raises_prints_its_traceback_the_report_and_exits_1(tmp_path):
    out = tmp_path / "raises"
    done = trainpace_run("--out", out, "raises.py")
    assert done.returncode == 1
    err = done.stderr
    assert "Traceback (most recent call last):" in err
    assert f'File "{SCRIPTS / "raises.py"}", line 19, in <module>' in err
    assert "ValueError: the script's own error at step 10" in err
    assert "runpy" not in err and "trainpace/cli" not in err and "autopatch" not in err
    assert err.index("ValueError") < err.index("throughput")  # the report comes after
    assert json.loads((out / "summary.json").read_text())["steps"]["total"] == 10


def test_sys_exit_3_gives_3_and_the_report(tmp_path):
    out = tmp_path / "exits"
    done = trainpace_run("--out", out, "exits.py")
    assert done.returncode == 3
    assert "script: leaving with 3" in done.stdout
    assert "throughput" in done.stderr
    assert len(steps_of(out)) == 12


@pytest.mark.parametrize(("sig", "traceback"), [(signal.SIGTERM, False),
                                                (signal.SIGINT, True)])
def test_killed_by_a_signal_the_report_is_printed_and_the_folder_complete(tmp_path, sig,
                                                                         traceback):
    out, flag = tmp_path / "killed", tmp_path / "flag"
    process = subprocess.Popen(command("--window", "5", "--out", out, "until_killed.py", flag),
                               cwd=SCRIPTS, env=env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not flag.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert flag.exists(), process.communicate()
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == -sig, err[-3000:]  # as Python itself ends on that signal
    assert ("KeyboardInterrupt" in err) is traceback
    assert "throughput" in err and f"run folder: {out}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["total"] >= 20
    assert summary["steps"]["total"] == len(steps_of(out))
    assert json.loads((out / "meta.json").read_text())["finished_at"] is not None


def test_a_module_under_dash_m(tmp_path):
    out = tmp_path / "module"
    done = trainpace_run("--json", "--quiet", "--out", out, "-m", "tinypkg.train",
                         "--steps", "12")
    assert done.returncode == 0, done.stderr
    assert f"argv0 {SCRIPTS / 'tinypkg' / 'train.py'} name __main__ package tinypkg" in done.stderr
    assert json.loads(done.stdout)["steps"]["total"] == 12


def test_no_dataloader_step_times_but_samples_unknown_with_a_hint(tmp_path):
    done = trainpace_run("--json", "--quiet", "--out", tmp_path / "blind", "no_loader.py")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["steps"]["total"] == 40
    assert summary["time"]["step_s_median"] > 0
    assert summary["throughput"]["samples_per_s"] is None  # not a zero
    assert summary["data"]["wait_pct"] is None
    (finding,) = [f for f in summary["diagnosis"]["findings"] if f["id"] == "run_no_dataloader"]
    assert "--samples-per-step" in finding["advice"][0]
    assert "No torch.utils.data.DataLoader was iterated" in done.stderr  # in the report too
    saved = json.loads((tmp_path / "blind" / "summary.json").read_text())
    assert saved["throughput"]["samples_per_s"] is None


def test_samples_per_step_supplies_the_counts(tmp_path):
    done = trainpace_run("--json", "--quiet", "--out", tmp_path / "given",
                         "--samples-per-step", "8", "--tokens-per-step", "80", "no_loader.py")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    tp = summary["throughput"]
    assert tp["samples_per_s"] == pytest.approx(tp["steps_per_s"] * 8)
    assert tp["tokens_per_s"] == pytest.approx(tp["steps_per_s"] * 80)
    assert {r["samples"] for r in steps_of(tmp_path / "given")} == {8}
    # no DataLoader: the data wait stays unknown, never 0.0% (issue 25 §6)
    assert summary["data"]["wait_pct"] is None
    assert summary["data"]["wait_s_per_step"] is None
    (finding,) = [f for f in summary["diagnosis"]["findings"] if f["id"] == "run_no_dataloader"]
    assert finding["title"].endswith("for training: the data wait is unknown")
    assert json.loads((tmp_path / "given" / "summary.json").read_text())["data"]["wait_pct"] is None


def test_a_script_that_never_trains_the_report_says_what_it_could_not_see(tmp_path):
    done = trainpace_run("--out", tmp_path / "nothing", "no_training.py")
    assert done.returncode == 0, done.stderr
    assert "script: sum 45.0" in done.stdout
    assert "No optimizer step was seen" in done.stderr
    assert "No torch.utils.data.DataLoader was iterated" in done.stderr


BAD = [
    (["nothere.py"], 2, "nothere.py: no such file"),
    (["-m", "no_such_module_here"], 2, "-m no_such_module_here: no module of that name"),
    (["-m", "tinypkg"], 2, "-m tinypkg: a package without __main__.py"),
    (["--bogus", "plain_loop.py"], 2, "unrecognized option --bogus"),
    (["--window", "0", "plain_loop.py"], 2, "argument --window: must be at least 1, got 0"),
    ([], 2, "no script given"),
    (["{broken}"], 1, "the script does not compile (SyntaxError: '(' was never closed)"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD)
def test_bad_input_one_clear_line_and_the_exit_code(tmp_path, args, code, message):
    broken = tmp_path / "broken.py"
    broken.write_text("x = (\n")
    args = [str(broken) if a == "{broken}" else a for a in args]
    done = trainpace_run("--out", tmp_path / "never", *args)
    assert done.returncode == code
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("trainpace run: error: ")
    assert message in lines[0]
    assert not (tmp_path / "never").exists()  # nothing started


def tmux(socket, *args):
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True,
                          env=env(), check=True).stdout


def whole_panel_at_the_bottom(screen):
    """(the rows above the panel, the panel) when the screen ends with a whole live panel."""
    rows = screen.rstrip("\n").split("\n")
    while rows and not rows[-1].strip():
        rows.pop()
    tops = [i for i, row in enumerate(rows) if row.startswith("╭─ trainpace run · plain_loop.py")]
    if not tops or not rows[-1].startswith("╰"):
        return None
    top = tops[-1]
    if not all(row.startswith("│") and row.rstrip().endswith("│") for row in rows[top + 1:-1]):
        return None
    return rows[:top], "\n".join(rows[top:])


PANEL_PARTS = ("throughput", "training time", "device utilization", "memory bandwidth",
               "data loading", "samples/s", "this window  step", "bottleneck so far  ",
               "target  ETA ~")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")
@pytest.mark.parametrize(("columns", "lines"), [(120, 45), (80, 24)])
def test_live_panel_in_a_real_terminal(tmp_path, columns, lines):
    """The panel at the bottom mid-run, the script's output readable above it; the report
    at the end, the panel gone.

    The script holds after step 60 until the test has seen the panel, so "mid-run" does not
    depend on how fast a loaded machine runs it. pytest imports readline, and GNU readline
    exports COLUMNS=80 and LINES=24 into the process's environment (not into os.environ): a
    tmux server started with it gives them to the pane, where rich takes them over the real
    size. So the test starts its own tmux server (-L) from os.environ, unsets them in the pane,
    and runs at two sizes, the smallest being a plain 80×24 terminal.
    """
    socket = f"trainpace-test-{os.getpid()}-{columns}x{lines}"
    release, exit_code = tmp_path / "release", tmp_path / "exit-code"
    inner = " ".join(f"'{part}'" for part in command(
        "--window", "10", "--target-loss", "0.2", "--out", tmp_path / "live", "plain_loop.py",
        "--steps", "100", "--learnable", "--print-every", "20", "--sleep-ms", "10",
        "--hold-at", "60", "--until", release))
    shell = (f"unset COLUMNS LINES; cd '{SCRIPTS}' && {inner}; echo $? > '{exit_code}'; "
             "sleep 600")
    tmux(socket, "-f", "/dev/null", "new-session", "-d", "-s", "live", "-x", str(columns),
         "-y", str(lines), shell)
    try:
        deadline, screen, seen = time.monotonic() + 240, "", None
        while time.monotonic() < deadline and not exit_code.exists():
            screen = tmux(socket, "capture-pane", "-p", "-t", "live")  # the screen only
            seen = whole_panel_at_the_bottom(screen)
            if seen is not None and "script: step 60" in screen and all(
                    part in seen[1] for part in PANEL_PARTS):
                break
            time.sleep(0.2)
        assert seen is not None and not exit_code.exists(), screen
        above, panel = seen
        assert all(part in panel for part in PANEL_PARTS), panel  # the five signs so far
        assert "not diagnosed yet" not in panel  # the bottleneck so far is a diagnosis
        # The script's output, above the panel, line by line as it printed it.
        printed = [row for row in above if row.startswith("script: ")]
        assert [row.split(" loss ")[0] for row in printed] == [
            "script: step 20", "script: step 40", "script: step 60"], screen
        assert all(re.fullmatch(r"script: step \d+ loss \d\.\d{3}", row) for row in printed)
        release.touch()
        while time.monotonic() < deadline and not exit_code.exists():
            time.sleep(0.2)
        assert exit_code.read_text().strip() == "0"
        end = tmux(socket, "capture-pane", "-p", "-t", "live", "-S", "-")  # and the history
        assert "trainpace run · plain_loop.py · step" not in end  # the live panel is gone
        for step in (20, 40, 60, 80, 100):
            assert end.count(f"script: step {step} loss ") == 1, end  # no redraw left behind
        assert "script: done" in end and "run folder:" in end
        assert end.index("script: done") < end.index("╭─ trainpace run plain_loop.py")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], env=env(), check=False,
                       capture_output=True)


def test_work_after_the_optimizer_step_is_in_the_step_the_evaluation_outside(tmp_path):
    """A sleep after each optimizer.step() is in step_s; the evaluation between epochs is
    outside; both as the Meter written into the same loop measures them."""
    epochs, steps, tail_s, eval_s = 2, 15, 0.02, 0.3
    flags = ["--epochs", epochs, "--steps", steps, "--tail-ms", tail_s * 1e3,
             "--eval-ms", eval_s * 1e3]
    done = trainpace_run("--json", "--quiet", "--window", "10", "--out", tmp_path / "run",
                         "epochs_eval.py", *flags)
    assert done.returncode == 0, done.stderr
    by_hand = subprocess.run([sys.executable, "epochs_eval.py", *map(str, flags), "--meter",
                              str(tmp_path / "hand")], cwd=SCRIPTS, env=env(),
                             capture_output=True, text=True, timeout=120)
    assert by_hand.returncode == 0, by_hand.stderr
    for folder in (tmp_path / "run", tmp_path / "hand"):
        rows = steps_of(folder)
        assert len(rows) == epochs * steps
        # A sleep lasts at least its time: every step holds its tail.
        assert min(r["step_s"] for r in rows) >= tail_s, folder
        # The evaluation after epoch 1 is outside (the last one comes after the last step),
        # before the first step of epoch 2.
        (first_of_epoch_2,) = [r for r in rows if r["step"] == steps + 1]
        assert first_of_epoch_2["outside_s"] >= eval_s
        # The tails are not outside: were they, every gap between steps would hold one; as it
        # is, the gaps are the loop's own overhead, and a loaded machine preempting some of
        # them leaves the median far below a tail (a sum of the gaps would collect them all).
        gaps = [r["outside_s"] for r in rows if r["step"] != steps + 1]
        assert statistics.median(gaps) < tail_s / 2, folder
    summary = json.loads(done.stdout)
    hand = json.loads((tmp_path / "hand" / "summary.json").read_text())
    # The same loop, the same ways of counting: the machine's load is all that differs (and
    # with it which steps other processes slowed, and so where auto warm-up ends).
    assert summary["steps"]["total"] == hand["steps"]["total"] == epochs * steps
    assert summary["steps"]["warmup_mode"] == hand["steps"]["warmup_mode"]
    ratio = summary["time"]["step_s_median"] / hand["time"]["step_s_median"]
    assert 0.5 < ratio < 2.0, (summary["time"], hand["time"])


@pytest.mark.parametrize("interpreter", ["python", "python3", sys.executable])
def test_an_interpreter_before_the_script_is_taken_as_python_would(tmp_path, interpreter):
    out = tmp_path / "py"
    done = trainpace_run("--json", "--quiet", "--out", out, "--", interpreter, "edge.py",
                         "--where", "train", "--steps", "6")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["total"] == 6
    assert "script: argv0 edge.py" in done.stderr  # as typed, as python keeps it


def test_python_dash_m_after_the_separator(tmp_path):
    done = trainpace_run("--json", "--quiet", "--out", tmp_path / "m", "--", "python3", "-m",
                         "tinypkg.train", "--steps", "5")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["total"] == 5


def test_credentials_in_the_scripts_arguments_are_not_stored(tmp_path):
    out = tmp_path / "secret"
    done = trainpace_run("--quiet", "--out", out, "edge.py", "--where", "train", "--steps",
                         "3", "--api-key", "SECRET123")
    assert done.returncode == 0, done.stderr
    argv = json.loads((out / "meta.json").read_text())["argv"]
    assert argv[-2:] == ["--api-key", "<redacted>"]
    assert not any(b"SECRET123" in p.read_bytes() for p in out.iterdir() if p.is_file())


@pytest.mark.parametrize(("where", "error", "frame"), [
    ("backward", "ArithmeticError: raised in backward", "torch/autograd"),
    ("dataset", "LookupError: raised in the dataset", "torch/utils/data"),
])
def test_tracebacks_show_the_frames_plain_python_shows(tmp_path, where, error, frame):
    done = trainpace_run("--quiet", "--out", tmp_path / where, "edge.py", "--where", where)
    assert done.returncode == 1
    err = done.stderr
    assert error in err and frame in err  # torch's own frames stay
    trace = err[err.index("Traceback (most recent call last):"):err.index(error)]
    assert "trainpace" not in trace and "runpy" not in trace, trace


def test_a_script_that_fails_its_argument_parsing_leaves_no_run(tmp_path):
    out = tmp_path / "never"
    done = trainpace_run("--out", out, "edge.py", "--where", "nonsense")
    assert done.returncode == 2
    assert "invalid choice: 'nonsense'" in done.stderr
    assert "throughput" not in done.stderr and "run folder:" not in done.stderr
    assert not out.exists()


@pytest.mark.parametrize(("script", "code", "said"), [
    (("edge.py", "--where", "nonsense"), 2, "invalid choice: 'nonsense'"),
    (("{tmp}/imports.py",), 1, "ModuleNotFoundError: No module named 'no_such_module_here'"),
])
def test_json_before_the_first_step_one_error_object_and_the_scripts_status(tmp_path, script,
                                                                            code, said):
    (tmp_path / "imports.py").write_text("import no_such_module_here\n")
    out = tmp_path / "never"
    done = trainpace_run("--json", "--quiet", "--out", out, "--",
                         *(part.format(tmp=tmp_path) for part in script))
    assert done.returncode == code
    assert said in done.stderr
    answer = json.loads(done.stdout)  # exactly one object on stdout
    assert answer["error"]["exit_code"] == code
    assert "before its first optimizer step" in answer["error"]["message"]
    assert not out.exists()


def test_two_training_threads_the_first_ones_steps_and_the_other_named(tmp_path):
    out = tmp_path / "threads"
    done = trainpace_run("--json", "--quiet", "--out", out, "--", "two_threads.py")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["steps"]["total"] == 31  # learner-a's: its first step alone, then 30
    assert len(steps_of(out)) == 31
    findings = {f["id"]: f for f in summary["diagnosis"]["findings"]}
    threads = findings["run_other_threads"]
    assert threads["evidence"] == {"measured_thread": "learner-a", "other_threads": ["learner-b"]}
    assert "'learner-b'" in threads["title"]
    # the other training thread is this process's own work, never "other processes" (which
    # the diagnosis may name on a busy machine, for the CPU they really took)
    assert not [f for f in summary["diagnosis"]["findings"]
                if "other processes" in json.dumps(f) and "learner-b" in json.dumps(f)]


def test_output_paths_with_markup_or_unwritable_are_never_the_scripts_problem(tmp_path):
    out = tmp_path / "a[/]b"
    done = trainpace_run("--out", out, "edge.py", "--where", "train", "--steps", "3")
    assert done.returncode == 0, done.stderr
    # the markup is shown as typed (the panel's title may be shortened to fit the terminal)
    assert f"trainpace report {out})" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "file").write_text("")
    page = tmp_path / "file" / "x.html"  # (a read-only folder is written by root)
    refused = trainpace_run("--out", tmp_path / "x", "--html", page, "edge.py",
                            "--where", "train", "--steps", "3")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"trainpace run: error: --html {page}: cannot be written (Not a directory); give a "
        "file path that can be written"]
    assert "script: argv0" not in refused.stdout  # refused before the script started
    port = trainpace_run("--prometheus", "70000", "edge.py", "--where", "train")
    assert port.returncode == 2
    assert "argument --prometheus: must be a TCP port, 1 to 65535, got 70000" in port.stderr
    assert "already holds a run" not in port.stderr


def tracebacks_outside_multiprocessing(err):
    """The tracebacks in `err` with a frame outside the standard library's multiprocessing.

    A worker killed by the group's SIGTERM while it connects to the parent's descriptor server
    makes that server thread print an EOFError traceback: the same happens to the bare script,
    and no frame of it is trainpace's or the script's."""
    blocks = err.split("Traceback (most recent call last):")[1:]
    frames = [re.findall(r'File "([^"]+)"', block) for block in blocks]
    return [block for block, files in zip(blocks, frames, strict=True)
            if not files or any("/multiprocessing/" not in file for file in files)]


def test_only_a_multiprocessing_servers_traceback_is_let_through():
    server = ('Traceback (most recent call last):\n  File "/py/multiprocessing/resource_sharer.py"'
              ', line 138, in _serve\nEOFError\n')
    ours = 'Traceback (most recent call last):\n  File "edge.py", line 3, in <module>\nKeyError\n'
    assert tracebacks_outside_multiprocessing("step 5 | ...\n" + server) == []
    assert len(tracebacks_outside_multiprocessing(server + ours)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("where", ["swallow", "workers"])
def test_sigterm_ends_the_script_after_the_report(tmp_path, where):
    """A retry loop's bare except swallows the exception; a DataLoader's workers get the
    scheduler's SIGTERM too (sent to the process group): -15 and the report, no traceback."""
    out, flag = tmp_path / where, tmp_path / "flag"
    process = subprocess.Popen(command("--window", "5", "--out", out, "edge.py", "--where",
                                       where, "--flag", flag),
                               cwd=SCRIPTS, env=env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not flag.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert flag.exists()
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:  # a script still training (the failure under test) is not left behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    assert tracebacks_outside_multiprocessing(err) == [], err
    assert process.returncode == -signal.SIGTERM  # as plain Python ends
    assert "throughput" in err and f"run folder: {out}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["total"] >= 20
    assert json.loads((out / "meta.json").read_text())["finished_at"] is not None


# The FLOPs of no_optimizer.py's one step (batch 16): Linear(8, 8) and Linear(8, 1) forward
# (2 * 16 * 8 * 8 + 2 * 16 * 8), backward: both weights' gradients, and the gradient into the
# first layer's output (the input needs none).
NO_OPTIMIZER_FLOPS = (2 * 16 * 8 * 8 + 2 * 16 * 8) + (2 * 16 * 8 * 8 + 2 * 16 * 8 + 2 * 16 * 8)


def test_a_script_without_an_optimizer_is_paced_by_backward_and_counted_once(tmp_path):
    """Weights updated by hand: no optimizer step would ever end the first step, and the FLOP
    counter switched on at its start would stay on; each backward() ends a step instead."""
    done = trainpace_run("--quiet", "--json", "--warmup", "5", "--out", tmp_path / "hand",
                         "no_optimizer.py", "30")
    assert done.returncode == 0, done.stderr
    assert "script: iterations 30 counting off at 1 modes 0" in done.stderr
    summary = json.loads(done.stdout)
    assert summary["steps"]["total"] == 30
    assert summary["flops"]["per_step"] == NO_OPTIMIZER_FLOPS
    meta = json.loads((tmp_path / "hand" / "meta.json").read_text())
    assert meta["vitals"]["flop_count"]["counted"] is True
    assert meta["vitals"]["flop_count"]["error"] is None
    ids = [f["id"] for f in summary["diagnosis"]["findings"]]
    assert "run_paced_by_backward" in ids and "run_no_optimizer_step" not in ids


def test_with_an_optimizer_several_backward_calls_are_one_step_without_a_dataloader(tmp_path):
    done = trainpace_run("--quiet", "--json", "--out", tmp_path / "acc",
                         "accumulate_no_loader.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["total"] == 10  # the optimizer's steps, not 40


@pytest.fixture
def full_disk(tmp_path):
    """A 16 KiB tmpfs filled to the last byte (needs the right to mount: root)."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()})")
    try:
        filler = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    os.write(filler, b"\0" * 4096)
        finally:
            os.close(filler)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_never_stops_the_script(full_disk):
    done = trainpace_run("--quiet", "--out", full_disk / "run", "edge.py", "--where", "train",
                         "--steps", "5")
    assert done.returncode == 0, done.stderr  # the script's own
    assert "script: argv0 edge.py" in done.stdout
    assert f"cannot write {full_disk / 'run' / 'steps.jsonl'} (No space left on device)" in (
        done.stderr)
    # every failure says which file (the summary's too)
    assert f"No space left on device: '{full_disk / 'run' / 'summary.json'}'" in done.stderr
