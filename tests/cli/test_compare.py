"""``trainpace compare RUN_A RUN_B``: the winner by time to target, by throughput otherwise."""

import json

import pytest

from report.folders import steps, write_run
from trainpace.cli import main


def small_batch(i):
    return 2.0 / (1 + i / 10)  # reaches 0.5 (smoothed) a little after step 30


def large_batch(i):
    return 2.0 / (1 + i / 25)  # more samples per step but slower per step to the same loss


@pytest.fixture
def runs(tmp_path):
    # A: batch 32, 0.1 s steps (320 samples/s); B: batch 128, 0.2 s steps (640 samples/s)
    a = write_run(tmp_path / "a", steps(200, step_s=0.1, samples=32, loss=small_batch),
                  meta={"loader": {"batch_size": 32}})
    b = write_run(tmp_path / "b", steps(200, step_s=0.2, samples=128, loss=large_batch),
                  meta={"loader": {"batch_size": 128}})
    return a, b


def compare(capsys, *argv):
    assert main(["compare", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_higher_throughput_that_trains_slower_loses_by_time_to_target(runs, capsys):
    data = compare(capsys, *runs, "--target-loss", "0.5")
    a, b = data["runs"]
    assert (a["label"], b["label"]) == ("A", "B")
    assert b["samples_per_s"] == pytest.approx(2 * a["samples_per_s"])
    assert a["reached_target"] and b["reached_target"]
    assert a["time_to_target_s"] < b["time_to_target_s"]
    assert (data["winner"], data["by"]) == ("A", "time_to_target")
    assert "although B has the higher throughput" in data["reason"]
    assert data["target"] == {"name": "loss", "value": 0.5, "higher_is_better": False}
    assert (a["batch_size"], b["batch_size"]) == (32, 128)
    # the figures agree with one another: time = step time × steps, samples = batch × steps
    assert a["time_to_target_s"] == pytest.approx(0.1 * a["steps_to_target"])
    assert b["samples_to_target"] == 128 * b["steps_to_target"]


def test_only_one_run_reaches_the_target(runs, capsys):
    # 0.2: A gets there near step 90 of its 200, B would need about 225
    data = compare(capsys, *runs, "--target-loss", "0.2")
    assert [r["reached_target"] for r in data["runs"]] == [True, False]
    assert (data["winner"], data["by"]) == ("A", "time_to_target")
    assert data["reason"].startswith("only A reaches loss ≤ 0.2")


def test_neither_reaches_the_target_so_throughput_decides_and_says_so(runs, capsys):
    data = compare(capsys, *runs, "--target-loss", "0.01")
    assert (data["winner"], data["by"]) == ("B", "throughput")
    assert data["reason"].startswith("neither run reaches loss ≤ 0.01; by throughput B is faster")
    assert data["throughput_metric"] == "samples_per_s"


def test_no_target_means_throughput(runs, capsys):
    data = compare(capsys, *runs)
    assert (data["winner"], data["by"], data["target"]) == ("B", "throughput", None)
    assert data["reason"].startswith("no target given (--target-loss)")
    assert [r["reached_target"] for r in data["runs"]] == [None, None]


def test_the_runs_own_common_target_is_used(tmp_path, capsys):
    meta = {"config": {"warmup": 0, "target_loss": 0.5}}
    a = write_run(tmp_path / "a", steps(200, step_s=0.1, samples=32, loss=small_batch), meta=meta)
    b = write_run(tmp_path / "b", steps(200, step_s=0.2, samples=128, loss=large_batch), meta=meta)
    data = compare(capsys, a, b)
    assert (data["winner"], data["by"]) == ("A", "time_to_target")


def test_identical_runs_are_a_tie(tmp_path, capsys):
    a = write_run(tmp_path / "a", steps(50, step_s=0.1, samples=32))
    b = write_run(tmp_path / "b", steps(50, step_s=0.1, samples=32))
    data = compare(capsys, a, b)
    assert data["winner"] is None
    assert "both run at 320 samples/s" in data["reason"]


def test_table_output(runs, capsys):
    assert main(["compare", *map(str, runs), "--target-loss", "0.5"]) == 0
    out = capsys.readouterr().out
    for row in ("samples/s", "batch size", "steps to target", "samples to target", "time to target"):
        assert row in out
    assert "winner: A (by time to target)" in out


def test_bad_run_folder_is_exit_1(runs, tmp_path, capsys):
    assert main(["compare", str(runs[0]), str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainpace compare: error: ") and "no such folder" in err[0]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_a_target_that_is_not_a_finite_number_is_refused(runs, capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["compare", *map(str, runs), f"--target-loss={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --target-loss: must be a finite number (the loss both runs are timed to), got '{value}'" in err
    assert "Traceback" not in err


def test_the_library_refuses_it_too(runs):
    from trainpace import ConfigError, compare_runs, read_run

    with pytest.raises(ConfigError, match="target_loss must be a finite number"):
        compare_runs(read_run(runs[0]), read_run(runs[1]), target_loss=float("nan"))


def test_a_bad_line_in_a_run_is_a_note_in_the_comparison(runs, capsys):
    path = runs[0] / "steps.jsonl"
    lines = path.read_text().splitlines()
    lines[4] = lines[4].replace('"step_s":0.1', '"step_s":"slow"').replace('"step_s": 0.1', '"step_s": "slow"')
    path.write_text("\n".join(lines) + "\n")
    assert main(["compare", *map(str, runs)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"note: {path}:5: skipped a line that is not a step record" in out
    data = compare(capsys, *runs)
    assert data["runs"][0]["notes"][0].startswith(f"{path}:5: skipped a line")
