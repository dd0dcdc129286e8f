"""What a run costs, from the command line: ``report --price-per-hour``, ``compare --price-per-hour``."""

import json

import pytest

from report.folders import steps, write_run
from trainpace.cli import main
from trainpace.runlog import Record
from trainpace.sinks.runfolder import RunFolderSink


def _with_system(path, rows):
    sink = RunFolderSink(path)
    sink.log(Record("system", {"rows": rows}))
    sink.close()
    return path


def test_report_prices_a_run_and_differences_the_energy_counter(tmp_path, capsys):
    # 100 steps of 0.1 s, 32 samples each: 320 samples/s; a GPU drawing 250 W by its counter
    run = write_run(tmp_path / "run", steps(100, step_s=0.1, samples=32))
    _with_system(run, [{"t_s": t, "gpus": [{"index": 0, "energy_mj": 250_000 * t,
                                            "power_w": 999.0}]}
                       for t in (0.0, 2.5, 5.0, 7.5, 10.0)])
    assert main(["report", str(run), "--json", "--price-per-hour", "3.6",
                 "--grid-g-per-kwh", "400"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert cost["price_per_hour"] == 3.6
    assert cost["usd_per_million_samples"] == pytest.approx(3.6 / 3600 / 320 * 1e6)
    assert cost["usd_total"] == pytest.approx(3.6 * 10.0 / 3600)
    assert cost["energy_source"] == "nvml_total_energy"  # the counter, not the power readings
    assert cost["power_w_mean"] == pytest.approx(250.0)
    assert cost["energy_j_per_sample"] == pytest.approx(250.0 / 320)
    measured_s = 0.1 * 100
    assert cost["kwh"] == pytest.approx(250.0 * measured_s / 3.6e6)
    assert cost["co2_kg"] == pytest.approx(cost["kwh"] * 0.4)


def test_report_without_an_energy_source_says_which_was_missing(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps(50, step_s=0.1, samples=8))
    _with_system(run, [{"t_s": t, "gpus": [], "host": {"system_cpu_pct": 10.0}}
                       for t in (0.0, 5.0)])
    assert main(["report", str(run), "--price-per-hour", "2"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "per M samples" in out
    assert "energy not measured (no energy source" in out


def test_a_negative_price_is_one_clear_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps(10, step_s=0.1, samples=8))
    assert main(["report", str(run), "--price-per-hour", "-1"]) == 1
    err = capsys.readouterr().err
    assert "price_per_hour must be a finite number >= 0" in err and "Traceback" not in err


def test_compare_says_what_the_faster_run_saves(tmp_path, capsys):
    # both train to the same loss per step; B's steps take 0.08 s against A's 0.1 s
    def loss(i):
        return 2.0 / (1 + i / 10)

    a = write_run(tmp_path / "a", steps(200, step_s=0.1, samples=32, loss=loss))
    b = write_run(tmp_path / "b", steps(200, step_s=0.08, samples=32, loss=loss))
    assert main(["compare", str(a), str(b), "--target-loss", "0.5", "--price-per-hour", "3",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["winner"] == "B"
    ra, rb = data["runs"]
    saved = data["savings"]
    assert saved["sooner_pct"] == pytest.approx(20.0)
    assert saved["usd_per_run"] == pytest.approx(3 / 3600 * (ra["time_to_target_s"]
                                                              - rb["time_to_target_s"]))
    assert saved["text"].startswith("B reaches the target 20% sooner: saves $")
    assert saved["text"].endswith("per run at $3/h")
    assert rb["usd_per_million_samples"] == pytest.approx(3 / 3600 / 400 * 1e6)
